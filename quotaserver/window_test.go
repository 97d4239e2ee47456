package quotaserver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/quotaserver"
)

// serve starts a server of one partition, without election, stopped when
// the test ends.
func serve(t *testing.T, nc *nats.Conn, opts quotaserver.Options) *quotaserver.Server {
	t.Helper()
	srv, err := quotaserver.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// TestFixedWindowOverNATS: a FIXED_WINDOW take never waits past the window
// after the one it arrives in (docs/quota.md), even when an earlier take
// already waits for that window: limit 1 per 2s, a wait limit of 10s,
// three takes at W+0.3s are OK, OK_WAIT until W+2s, and REJECTED
// timeout with retry_after 1.7s (not OK_WAIT into W+4s).
func TestFixedWindowOverNATS(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	var mu sync.Mutex
	w := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) // a window start
	now := w.Add(300 * time.Millisecond)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cfg := namespaces(&quota.Namespace{Name: "jobs", Buckets: map[string]*quota.Spec{"batch": {Algorithm: quota.FixedWindow, Limit: 1,
		Window: 2 * time.Second, WaitTimeout: 10 * time.Second, MaxTokensPerRequest: 1}}})
	serve(t, nc, quotaserver.Options{Config: sources.QuotaFunc(func() *quota.Config { return cfg }), Now: clock, Logger: quiet()})
	subject := quotaserver.TakeSubject("root")
	for i, want := range []takeReply{
		{Status: "OK", Wait: "0s", RetryAfter: "0s"},
		{Status: "OK_WAIT", Wait: "1.700s", RetryAfter: "0s"},
		{Status: "REJECTED", Wait: "0s", Reason: quota.ReasonTimeout, RetryAfter: "1.700s"},
	} {
		got := take(t, nc, subject, `{"bucket":"jobs:batch"}`)
		if got.Status != want.Status || got.Wait != want.Wait || got.Reason != want.Reason || got.RetryAfter != want.RetryAfter {
			t.Errorf("take %d at W+0.3s: %+v, want %+v", i, got, want)
		}
	}
	// At W+2s the W+4s window is the next one.
	mu.Lock()
	now = w.Add(2 * time.Second)
	mu.Unlock()
	if got := take(t, nc, subject, `{"bucket":"jobs:batch"}`); got.Status != "OK_WAIT" || got.Wait != "2s" {
		t.Errorf("take at W+2s: %+v, want OK_WAIT 2s", got)
	}
}
