package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
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

// TestBenchUpRefusesBadInput: allot bench up refuses lease counts that
// are not positive, and running in process (it measures allot up and
// the echo as processes of their own), before it starts anything.
func TestBenchUpRefusesBadInput(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"--leases", "0"},
		{"--leases", "1000,x"},
		{"--leases", ","},
		{"--in-process", "--leases", "100"},
	} {
		env, out := benchEnv()
		if code := run(ctx, env, append([]string{"bench", "up"}, args...)); code == 0 {
			t.Errorf("allot bench up %v: exit 0, want an error; output:\n%s", args, out)
		}
		if strings.Contains(out.String(), "filled") {
			t.Errorf("allot bench up %v ran before refusing:\n%s", args, out)
		}
	}
}

// TestBenchLoadInProcess runs a tiny load benchmark through the command
// and checks it writes its results; it does not look at the figures.
// Without --out they go to a new directory under TMPDIR, named in the
// output, never to the committed bench/results.
func TestBenchLoadInProcess(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Chdir(t.TempDir()) // where a relative default would land
	env, out := benchEnv()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"bench", "load", "--in-process", "--duration", "300ms", "--warmup", "100ms",
		"--phases", "1", "--conns", "1", "--clients", "4", "--pipeline", "1"}
	if code := run(ctx, env, args); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	m := regexp.MustCompile(`results in (\S+)`).FindStringSubmatch(out.String())
	if m == nil || filepath.Dir(m[1]) != tmp {
		t.Fatalf("output does not name a results directory under %s:\n%s", tmp, out)
	}
	dir := m[1]
	if entries, err := os.ReadDir("."); err != nil || len(entries) > 0 {
		t.Errorf("bench wrote into the working directory: %v %v", entries, err)
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

// TestBenchQuotaInProcess runs a tiny quota benchmark through the command
// with both partition counts and checks its results and ratios are
// written; a bad --quota-partitions is refused before anything runs.
func TestBenchQuotaInProcess(t *testing.T) {
	dir := t.TempDir()
	env, out := benchEnv()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"bench", "quota", "--in-process", "--out", dir, "--duration", "200ms", "--warmup", "100ms",
		"--phases", "1", "--conns", "1", "--clients", "4", "--quota-partitions", "1,2"}
	if code := run(ctx, env, args); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, f := range []string{"quota.json", "quota.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	for _, want := range []string{"1 partition(s): quota / bare echo throughput", "2 partition(s): quota / bare echo throughput"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"0", "1,x", "65", ""} {
		env, out := benchEnv()
		if code := run(ctx, env, []string{"bench", "quota", "--in-process", "--out", dir, "--quota-partitions", bad}); code == 0 {
			t.Errorf("--quota-partitions %q accepted:\n%s", bad, out)
		}
	}
}
