package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
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

// TestUpThenGet runs the README's quick start in-process: `allot up` on a
// free port, then `allot get` against it in JSON, then SIGINT-like drain.
func TestUpThenGet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var upOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, testEnv(&upOut), []string{"up", "--port", "0", "--data-dir", t.TempDir(), "--log-level", "warn"})
	}()
	urlRE := regexp.MustCompile(`nats://127\.0\.0\.1:\d+`)
	var url string
	for deadline := time.Now().Add(30 * time.Second); url == "" && time.Now().Before(deadline); {
		select {
		case code := <-done:
			t.Fatalf("up exited with %d: %s", code, upOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if strings.Contains(upOut.String(), "allot is up") {
			url = urlRE.FindString(upOut.String())
		}
	}
	if url == "" {
		t.Fatalf("up did not start: %s", upOut.String())
	}
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
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("up exited %d: %s", code, upOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("up did not drain")
	}
}
