package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot/allot/internal/poll"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testEnv(out io.Writer) *cliEnv {
	return &cliEnv{stdin: strings.NewReader(""), stdout: out, stderr: out, log: slog.New(slog.DiscardHandler)}
}

// upRun is an `allot up` running in this process.
type upRun struct {
	url  string
	out  *syncBuffer
	done chan int
	stop context.CancelFunc
}

// startUp runs `allot up --port 0 --log-level warn` with args until the
// test ends, and waits until it says it is up.
func startUp(t *testing.T, args ...string) *upRun {
	t.Helper()
	return startUpEnv(t, "", args...)
}

// startUpEnv is startUp with metricsAddr as up's default metrics address
// ("": the real default).
func startUpEnv(t *testing.T, metricsAddr string, args ...string) *upRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := &upRun{out: &syncBuffer{}, done: make(chan int, 1), stop: cancel}
	env := testEnv(u.out)
	env.upMetricsAddr = metricsAddr
	go func() {
		u.done <- run(ctx, env, append([]string{"up", "--port", "0", "--log-level", "warn"}, args...))
	}()
	t.Cleanup(func() { u.wait(t) })
	urlRE := regexp.MustCompile(`nats://127\.0\.0\.1:\d+`)
	poll.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		select {
		case code := <-u.done:
			u.done <- code
			t.Fatalf("up exited with %d: %s", code, u.out.String())
		default:
		}
		if !strings.Contains(u.out.String(), "allot is up") {
			return fmt.Errorf("up did not start: %s", u.out.String())
		}
		return nil
	})
	u.url = urlRE.FindString(u.out.String())
	return u
}

// wait stops the run (as SIGINT does) and checks that it drains cleanly.
func (u *upRun) wait(t *testing.T) {
	t.Helper()
	u.stop()
	select {
	case code := <-u.done:
		u.done <- code
		if code != 0 {
			t.Errorf("up exited %d: %s", code, u.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Error("up did not drain")
	}
}

// TestUpTryLineIsAnswered: the `allot get` that `allot up` prints to try
// is answered with a lease as printed, also with --unmatched reject, which
// seeds no catch-all template (a made-up resource is then a 404).
func TestUpTryLineIsAnswered(t *testing.T) {
	tryRE := regexp.MustCompile(`try: go run \./cmd/allot (get [^\n]*)`)
	for _, extra := range [][]string{nil, {"--unmatched", "reject"}} {
		up := startUp(t, append([]string{"--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0"}, extra...)...)
		var try []string
		poll.Until(t, 10*time.Second, "the line to try", func() bool {
			m := tryRE.FindStringSubmatch(up.out.String())
			if m != nil {
				try = strings.Fields(m[1])
			}
			return m != nil
		})
		if code, out := runCtx(testCtx(t), try...); code != 0 || !strings.Contains(out, `"capacity": 10`) {
			t.Errorf("up %q printed %q to try: exit %d: %s", extra, try, code, out)
		}
	}
}

// TestUpThenGet runs the README's quick start in-process: `allot up` on a
// free port, then `allot get` against it in JSON, then SIGINT-like drain.
func TestUpThenGet(t *testing.T) {
	ctx := context.Background()
	up := startUp(t, "--data-dir", t.TempDir())
	url := up.url
	var out syncBuffer
	if code := run(ctx, testEnv(&out), []string{"get", "--nats", url, "mysql/main", "--wants", "600", "--client", "t1"}); code != 0 {
		t.Fatalf("get exited %d: %s", code, out.String())
	}
	// mysql/main is seeded from deploy/templates with capacity 500.
	if !strings.Contains(out.String(), `"capacity": 500`) || !strings.Contains(out.String(), `"resource_id": "mysql/main"`) {
		t.Fatalf("get printed %s", out.String())
	}
	out = syncBuffer{}
	if code := run(ctx, testEnv(&out), []string{"get", "--nats", url, "db", "--wants", "-3"}); code == 0 || !strings.Contains(out.String(), "negative") {
		t.Fatalf("negative wants: code %d, %s", code, out.String())
	}
	out = syncBuffer{}
	if code := run(ctx, testEnv(&out), []string{"release", "--nats", url, "mysql/main", "--client", "t1"}); code != 0 || !strings.Contains(out.String(), `"released": 1`) {
		t.Fatalf("release: code %d, %s", code, out.String())
	}
	// Without --client, get prints the id it made up, and release takes it
	// back under --client-id.
	out = syncBuffer{}
	if code := run(ctx, testEnv(&out), []string{"get", "--nats", url, "mysql/main", "--wants", "5"}); code != 0 {
		t.Fatalf("get exited %d: %s", code, out.String())
	}
	id := regexp.MustCompile(`client id: (\S+)`).FindStringSubmatch(out.String())
	if id == nil || !strings.Contains(out.String(), `"capacity": 5`) {
		t.Fatalf("get does not print its client id: %s", out.String())
	}
	out = syncBuffer{}
	if code := run(ctx, testEnv(&out), []string{"release", "--nats", url, "mysql/main", "--client-id", id[1]}); code != 0 || !strings.Contains(out.String(), `"released": 1`) {
		t.Fatalf("release --client-id %s: code %d, %s", id[1], code, out.String())
	}
	up.wait(t)
}

// TestUpLocksDataDir: a second `allot up` on the data dir of a running one
// fails at once, naming the dir and the holder, instead of deposing it; once
// the first stops, the dir is free again.
func TestUpLocksDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startUp(t, "--data-dir", dir)
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := run(ctx, testEnv(&out), []string{"up", "--port", "0", "--log-level", "warn", "--data-dir", dir})
	if code == 0 {
		t.Fatalf("second up on %s exited 0: %s", dir, out.String())
	}
	for _, want := range []string{dir, fmt.Sprintf("pid %d", os.Getpid()), "--data-dir"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("second up's error does not name %q: %s", want, out.String())
		}
	}
	first.wait(t)
	startUp(t, "--data-dir", dir)
}

// TestUpBusyPort: `allot up` on a port in use fails with the listen error.
func TestUpBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	var out syncBuffer
	code := run(context.Background(), testEnv(&out), []string{"up", "--port", port, "--data-dir", t.TempDir()})
	if code == 0 || !strings.Contains(out.String(), "address already in use") || !strings.Contains(out.String(), "--port 0") {
		t.Fatalf("up on busy port %s: exit %d, %s", port, code, out.String())
	}
}

// TestUpUnmatchedReject: under --unmatched reject, up does not seed the
// catch-all example (which would leave nothing unmatched) and says so; a
// catch-all stored by an earlier run is reported.
func TestUpUnmatchedReject(t *testing.T) {
	ctx := context.Background()
	up := startUp(t, "--data-dir", t.TempDir(), "--unmatched", "reject", "--log-level", "info")
	if !strings.Contains(up.out.String(), "not seeding the catch-all example template") {
		t.Errorf("startup log does not mention the catch-all:\n%s", up.out.String())
	}
	if code, out := runCtx(ctx, "get", "--nats", up.url, "no-template-matches-this", "--client", "c1"); code == 0 || !strings.Contains(out, "404") {
		t.Errorf("get of an unmatched resource under reject: exit %d, %s", code, out)
	}
	if code, out := runCtx(ctx, "get", "--nats", up.url, "mysql/main", "--client", "c1"); code != 0 {
		t.Errorf("get of a seeded example under reject: exit %d, %s", code, out)
	}
	up.wait(t)

	dir := t.TempDir()
	startUp(t, "--data-dir", dir).wait(t) // seeds the catch-all
	up = startUp(t, "--data-dir", dir, "--unmatched", "reject")
	if !strings.Contains(up.out.String(), "--unmatched reject has no effect while it exists") {
		t.Errorf("startup log does not report the stored catch-all:\n%s", up.out.String())
	}
}
