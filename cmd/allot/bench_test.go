package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func benchEnv() (*cliEnv, *bytes.Buffer) {
	var out bytes.Buffer
	return &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &out, log: slog.New(slog.DiscardHandler)}, &out
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "nonsense"},
		{"bench", "child"},
		{"bench", "child", "nonsense"},
	} {
		env, out := benchEnv()
		if code := run(context.Background(), env, args); code == 0 {
			t.Errorf("allot %v: exit 0, want an error; output:\n%s", args, out)
		}
	}
}

// TestBenchLoadInProcess runs a tiny load benchmark through the command
// and checks it writes its results; it does not look at the figures.
func TestBenchLoadInProcess(t *testing.T) {
	dir := t.TempDir()
	env, out := benchEnv()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"bench", "load", "--in-process", "--out", dir, "--duration", "300ms", "--warmup", "100ms",
		"--phases", "1", "--conns", "1", "--clients", "4", "--pipeline", "1"}
	if code := run(ctx, env, args); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, f := range []string{"load.json", "load.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if !strings.Contains(out.String(), "coordinator / bare echo") {
		t.Errorf("no ratio in output:\n%s", out)
	}
}
