package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/wire"
)

// quotaStatus returns the Status of quota namespace ns, if any.
func quotaStatusOf(a *Agent, ns string) (Status, bool) {
	for _, st := range a.Status() {
		if st.Kind == KindQuota && st.ResourceID == ns {
			return st, true
		}
	}
	return Status{}, false
}

// TestQuotaBadInput: malformed buckets, negative tokens and bad options
// are clear errors that change nothing (no namespace state, no report).
func TestQuotaBadInput(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	sub, err := nc.SubscribeSync("allot.root.quota.>")
	if err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, nc)
	ctx := context.Background()
	for _, b := range []string{"", "logins", "logins:", ":alice", "log.ins:alice", "logins:al ice", "logins:alice:x", "logins:*", "logins:" + strings.Repeat("a", 300), "lö:x"} {
		if _, err := a.Take(ctx, b, 1); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "bucket") {
			t.Errorf("Take(%q) error = %v, want a malformed-bucket error", b, err)
		}
		if err := a.Report(b, 1); err == nil {
			t.Errorf("Report(%q) accepted", b)
		}
	}
	if _, err := a.Take(ctx, "logins:alice", -1); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Take(-1) error = %v", err)
	}
	if err := a.Report("logins:alice", -5); err == nil {
		t.Error("Report(-5) accepted")
	}
	if _, err := a.Take(ctx, "logins:alice", 1, WithMaxWait(-time.Second)); err == nil {
		t.Error("negative max wait accepted")
	}
	if st := a.Status(); len(st) != 0 {
		t.Errorf("bad input left state: %+v", st)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("bad input sent %s", m.Subject)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Take(ctx, "logins:alice", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Take after Close: %v", err)
	}
	if err := a.Report("logins:alice", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Report after Close: %v", err)
	}
	for _, opt := range []Option{
		WithQuotaTimeout(0), WithQuotaTimeout(time.Hour), WithQuotaCircuit(0, time.Second), WithQuotaCircuit(3, 0),
		WithQuotaReportInterval(-1), WithQuotaFallback("a.b", 1, 1), WithQuotaFallback("ns", 0, 1),
		WithQuotaFallback("ns", -1, 1), WithQuotaFallback("ns", 1, 0), WithQuotaFallback("", 1, 1),
	} {
		if _, err := New(nc, opt); err == nil {
			t.Errorf("option accepted: %T", opt)
		}
	}
}

// TestQuotaUnavailable: with no quota service, Take fails closed without a
// fallback, and decides locally with one; after the threshold the circuit
// opens (Status says so) and Take no longer asks.
func TestQuotaUnavailable(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	a := newAgent(t, nc, WithQuotaFallback("logins", 2, 2), WithQuotaCircuit(2, time.Hour))
	ctx := context.Background()

	_, err := a.Take(ctx, "other:x", 1)
	if !errors.Is(err, ErrQuotaUnavailable) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no fallback: err = %v, want ErrQuotaUnavailable wrapping no responders", err)
	}

	for i := range 2 {
		res, err := a.Take(ctx, "logins:alice", 1)
		if err != nil || !res.Fallback || res.Limit != 2 || res.Remaining != int64(1-i) || res.Wait != 0 {
			t.Fatalf("take %d = %+v, %v; want a local OK from the full burst of 2", i, res, err)
		}
	}
	st, ok := quotaStatusOf(a, "logins")
	if !ok || !st.CircuitOpen || st.Source != SourceFallback || st.QuotaFailures != 2 || st.Capacity != 2 ||
		st.LastError == nil || st.CircuitRetry.Before(time.Now().Add(time.Minute)) {
		t.Fatalf("status after 2 failures = %+v, want the circuit open on the fallback", st)
	}
	before := nc.Stats().OutMsgs
	// The bucket is empty: at 2/s a token is at most 500ms away, within
	// the fallback's wait; with max wait 0 it is REJECTED "timeout".
	_, err = a.Take(ctx, "logins:alice", 1, WithMaxWait(0))
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Reason != "timeout" || !qe.Fallback || qe.RetryAfter <= 0 || qe.RetryAfter > 500*time.Millisecond {
		t.Fatalf("empty local bucket, max wait 0: err = %v", err)
	}
	if _, err := a.Take(ctx, "logins:bob", 3); !errors.As(err, &qe) || qe.Reason != "too_many_tokens" {
		t.Fatalf("3 tokens over a burst of 2: err = %v", err)
	}
	start := time.Now()
	res, err := a.Take(ctx, "logins:carol", 1)
	if err != nil || !res.Fallback || res.Wait <= 0 || time.Since(start) < res.Wait/2 {
		t.Fatalf("local OK_WAIT = %+v, %v after %v", res, err, time.Since(start))
	}
	// While the circuit is open a report charges the local bucket, into
	// debt (bounded at a second's worth): a take must wait about 1.5s,
	// a peek never waits.
	if err := a.Report("logins:dave", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Take(ctx, "logins:dave", 1, WithMaxWait(200*time.Millisecond)); !errors.As(err, &qe) || qe.Reason != "timeout" {
		t.Fatalf("take after a report of 5 at 2/s: err = %v, want REJECTED timeout", err)
	}
	if res, err := a.Take(ctx, "logins:dave", 0, WithMaxWait(0)); err != nil || res.Wait != 0 || res.Remaining != 0 {
		t.Fatalf("peek at a local bucket in debt = %+v, %v; want OK, nothing left, no wait", res, err)
	}
	if after := nc.Stats().OutMsgs; after != before {
		t.Errorf("the open circuit still asked the service (%d requests, then %d)", before, after)
	}
	if st, ok := quotaStatusOf(a, "other"); !ok || st.CircuitOpen || st.QuotaFailures != 1 || st.Capacity != 0 {
		t.Errorf("other namespace status = %+v, want one failure, circuit closed, no fallback", st)
	}
}

// TestQuotaSlowService: a service that answers after the quota timeout is
// a failure like no answer (a real server cannot be made this slow, hence
// the in-test responder); the caller's own context ending first is not.
func TestQuotaSlowService(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	release := make(chan struct{})
	defer close(release)
	if _, err := nc.Subscribe("allot.root.quota.take.>", func(*nats.Msg) { <-release }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, natstest.Conn(t, s), WithQuotaTimeout(50*time.Millisecond), WithQuotaFallback(AnyNamespace, 100, 5))
	res, err := a.Take(context.Background(), "api:k1", 1)
	if err != nil || !res.Fallback {
		t.Fatalf("slow service: %+v, %v; want the fallback's decision", res, err)
	}
	st, _ := quotaStatusOf(a, "api")
	if st.QuotaFailures != 1 || !errors.Is(st.LastError, nats.ErrTimeout) {
		t.Fatalf("status = %+v, want one timeout", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	if _, err := a.Take(ctx, "api:k1", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: err = %v", err)
	}
	if st, _ := quotaStatusOf(a, "api"); st.QuotaFailures != 1 {
		t.Errorf("a caller giving up counted as a failure: %+v", st)
	}
}

// TestReportBounded: reports for ever more distinct buckets do not pile
// up between flushes: at maxPendingReports buckets they are sent at once.
func TestReportBounded(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	a := newAgent(t, nc, WithQuotaReportInterval(time.Minute))
	n := maxPendingReports + 100
	for i := range n {
		if err := a.Report(fmt.Sprintf("logs:k%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	a.q.mu.Lock()
	pending := len(a.q.pending)
	a.q.mu.Unlock()
	if pending >= maxPendingReports || nc.Stats().OutMsgs < maxPendingReports {
		t.Errorf("%d reports pending, %d messages sent; want them sent at %d", pending, nc.Stats().OutMsgs, maxPendingReports)
	}
}
