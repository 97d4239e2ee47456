package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestBinaryDoesNotLinkTesting keeps the testing package (and its flags)
// out of the production binary; the benchmarks it embeds once pulled it in.
func TestBinaryDoesNotLinkTesting(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if slices.Contains(strings.Fields(string(out)), "testing") {
		t.Fatal("cmd/allot links the testing package; move what imports it into _test.go files")
	}
}
