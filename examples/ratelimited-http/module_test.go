package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuildsOutsideTheModule: the example, copied out of the module into
// a service of its own, builds both ways the README tells a service to
// use allot while the module is not published: a require of
// github.com/allot/allot replaced by a checkout (then go mod tidy), and a
// Go workspace holding the service and the checkout. So it imports no
// internal package, and every package it needs is public.
func TestBuildsOutsideTheModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own (-short)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no module root at %s: %v", root, err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	// newService returns a directory holding the example as a module
	// of its own, and a function that runs go commands in it.
	newService := func(t *testing.T) func(env []string, args ...string) (string, error) {
		svc := t.TempDir()
		if err := os.WriteFile(filepath.Join(svc, "main.go"), src, 0o644); err != nil {
			t.Fatal(err)
		}
		return func(env []string, args ...string) (string, error) {
			t.Helper()
			cmd := exec.Command(goBin, args...)
			cmd.Dir = svc
			// No workspace of the caller's, nor another toolchain, may
			// change what is built.
			cmd.Env = append(os.Environ(), append([]string{"GOWORK=", "GOTOOLCHAIN=local"}, env...)...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			t.Logf("go %s (%s): %v\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), err, out.String())
			return out.String(), err
		}
	}
	must := func(t *testing.T) func(string, error) {
		return func(out string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}
	}
	binary := func(t *testing.T) string { return filepath.Join(t.TempDir(), "ratelimited-http") }

	t.Run("replace", func(t *testing.T) {
		run := newService(t)
		// GOFLAGS=-mod=mod lets go.mod be completed as it is read.
		mod := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
		must(t)(run(mod, "mod", "init", "example.com/ratelimited-http"))
		must(t)(run(mod, "mod", "edit", "-require=github.com/allot/allot@v0.0.0", "-replace=github.com/allot/allot="+root))
		// Offline first, from the module cache; where it lacks some
		// module (tidy also wants those that allot's dependencies' tests
		// import, which a clean CI machine has not downloaded) from the
		// module proxy configured.
		if _, err := run(append(mod, "GOPROXY=off", "GOSUMDB=off"), "mod", "tidy"); err != nil {
			must(t)(run(mod, "mod", "tidy"))
		}
		must(t)(run(append(mod, "GOPROXY=off"), "build", "-o", binary(t), "."))
	})
	t.Run("workspace", func(t *testing.T) {
		run := newService(t)
		must(t)(run(nil, "mod", "init", "example.com/ratelimited-http"))
		must(t)(run(nil, "work", "init", ".", root))
		// A workspace resolves the whole module graph, which can name a
		// module that building allot alone never fetched (a clean machine
		// that ran only go test): offline first, then the proxy configured.
		if _, err := run([]string{"GOPROXY=off"}, "build", "-o", binary(t), "."); err != nil {
			must(t)(run(nil, "build", "-o", binary(t), "."))
		}
	})
}
