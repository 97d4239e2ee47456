package quota

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/quotatest"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/quotaserver"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newAgent returns a quiet agent on nc, closed when the test ends.
func newAgent(t testing.TB, nc *nats.Conn) *agent.Agent {
	t.Helper()
	a, err := agent.New(nc, agent.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// newClient returns a quota client of a new agent on nc, both closed when
// the test ends.
func newClient(t testing.TB, nc *nats.Conn, opts ...Option) *Client {
	t.Helper()
	q, err := New(newAgent(t, nc), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// newClockedClient is newClient on clk's time. Its agent is closed at
// once (the client lives on without it), so that the only timers on clk
// are the client's.
func newClockedClient(t testing.TB, nc *nats.Conn, clk *clocktest.Fake, opts ...Option) *Client {
	t.Helper()
	a, err := agent.New(nc, agent.WithLogger(quiet), agent.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	q, err := New(a, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	return q
}

// statusOf returns the Status of namespace ns, if any.
func statusOf(q *Client, ns string) (Status, bool) {
	for _, st := range q.Status() {
		if st.Namespace == ns {
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
	q := newClient(t, nc)
	ctx := context.Background()
	for _, b := range []string{"", "logins", "logins:", ":alice", "log.ins:alice", "logins:al ice", "logins:alice:x", "logins:*", "logins:" + strings.Repeat("a", 300), "lö:x"} {
		if _, err := q.Take(ctx, b, 1); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "bucket") {
			t.Errorf("Take(%q) error = %v, want a malformed-bucket error", b, err)
		}
		if err := q.Report(b, 1); err == nil {
			t.Errorf("Report(%q) accepted", b)
		}
	}
	if _, err := q.Take(ctx, "logins:alice", -1); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Take(-1) error = %v", err)
	}
	// More tokens than any bucket has or the service takes: refused here,
	// as Report refuses them, not sent to be refused (400) or, with the
	// service down, decided by a fallback.
	if _, err := q.Take(ctx, "logins:alice", wire.MaxQuotaTokens+1); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Take(10^12+1) error = %v", err)
	}
	if err := q.Report("logins:alice", -5); err == nil {
		t.Error("Report(-5) accepted")
	}
	if _, err := q.Take(ctx, "logins:alice", 1, WithMaxWait(-time.Second)); err == nil {
		t.Error("negative max wait accepted")
	}
	if st := q.Status(); len(st) != 0 {
		t.Errorf("bad input left state: %+v", st)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("bad input sent %s", m.Subject)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Take(ctx, "logins:alice", 1); !errors.Is(err, agent.ErrClosed) {
		t.Errorf("Take after Close: %v", err)
	}
	if err := q.Report("logins:alice", 1); !errors.Is(err, agent.ErrClosed) {
		t.Errorf("Report after Close: %v", err)
	}
	for _, opt := range []Option{
		WithTimeout(0), WithTimeout(time.Hour), WithCircuit(0, time.Second), WithCircuit(3, 0),
		WithReportInterval(-1), WithFallback("a.b", 1, 1), WithFallback("ns", 0, 1),
		WithFallback("ns", -1, 1), WithFallback("ns", 1, 0), WithFallback("", 1, 1),
	} {
		if _, err := New(newAgent(t, nc), opt); err == nil {
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
	clk := clocktest.New()
	q := newClockedClient(t, nc, clk, WithFallback("logins", 2, 2), WithCircuit(2, time.Hour))
	ctx := context.Background()

	_, err := q.Take(ctx, "other:x", 1)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no fallback: err = %v, want ErrUnavailable wrapping no responders", err)
	}

	for i := range 2 {
		res, err := q.Take(ctx, "logins:alice", 1)
		if err != nil || !res.Fallback || res.Limit != 2 || res.Remaining != int64(1-i) || res.Wait != 0 {
			t.Fatalf("take %d = %+v, %v; want a local OK from the full burst of 2", i, res, err)
		}
	}
	st, ok := statusOf(q, "logins")
	if !ok || !st.CircuitOpen || st.Failures != 2 || st.Fallback != 2 ||
		st.LastError == nil || !st.CircuitRetry.Equal(clk.Peek().Add(time.Hour)) {
		t.Fatalf("status after 2 failures = %+v, want the circuit open on the fallback", st)
	}
	before := nc.Stats().OutMsgs
	// The bucket is empty, and the agent's clock has not moved: at 2/s a
	// token is 500ms away, within the fallback's wait; with max wait 0 it
	// is REJECTED "no_wait".
	_, err = q.Take(ctx, "logins:alice", 1, WithMaxWait(0))
	var qe *RejectedError
	if !errors.As(err, &qe) || qe.Reason != "no_wait" || !qe.Fallback || qe.RetryAfter != 500*time.Millisecond {
		t.Fatalf("empty local bucket, max wait 0: err = %v", err)
	}
	if _, err := q.Take(ctx, "logins:bob", 3); !errors.As(err, &qe) || qe.Reason != "too_many_tokens" {
		t.Fatalf("3 tokens over a burst of 2: err = %v", err)
	}
	// Take waits the local OK_WAIT out on the agent's clock.
	var res Result
	waits := clocktest.Drive(t, clk, time.Minute, func() { res, err = q.Take(ctx, "logins:carol", 1) })
	if err != nil || !res.Fallback || res.Wait != 500*time.Millisecond || !slices.Equal(waits, []time.Duration{res.Wait}) {
		t.Fatalf("local OK_WAIT = %+v, %v after waits %v; want one of 500ms", res, err, waits)
	}
	// While the circuit is open a report charges the local bucket, into
	// debt (bounded at a second's worth): a take must wait about 1.5s,
	// a peek never waits.
	if err := q.Report("logins:dave", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Take(ctx, "logins:dave", 1, WithMaxWait(200*time.Millisecond)); !errors.As(err, &qe) || qe.Reason != "timeout" {
		t.Fatalf("take after a report of 5 at 2/s: err = %v, want REJECTED timeout", err)
	}
	if res, err := q.Take(ctx, "logins:dave", 0, WithMaxWait(0)); err != nil || res.Wait != 0 || res.Remaining != 0 {
		t.Fatalf("peek at a local bucket in debt = %+v, %v; want OK, nothing left, no wait", res, err)
	}
	if after := nc.Stats().OutMsgs; after != before {
		t.Errorf("the open circuit still asked the service (%d requests, then %d)", before, after)
	}
	if st, ok := statusOf(q, "other"); !ok || st.CircuitOpen || st.Failures != 1 || st.Fallback != 0 {
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
	q := newClient(t, natstest.Conn(t, s), WithTimeout(50*time.Millisecond), WithFallback(AnyNamespace, 100, 5))
	res, err := q.Take(context.Background(), "api:k1", 1)
	if err != nil || !res.Fallback {
		t.Fatalf("slow service: %+v, %v; want the fallback's decision", res, err)
	}
	st, _ := statusOf(q, "api")
	if st.Failures != 1 || !errors.Is(st.LastError, nats.ErrTimeout) {
		t.Fatalf("status = %+v, want one timeout", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	if _, err := q.Take(ctx, "api:k1", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: err = %v", err)
	}
	if st, _ := statusOf(q, "api"); st.Failures != 1 {
		t.Errorf("a caller giving up counted as a failure: %+v", st)
	}
}

// TestReportBounded: reports for ever more distinct buckets do not pile
// up between flushes: at maxPendingReports buckets they are sent at once.
func TestReportBounded(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	q := newClient(t, nc, WithReportInterval(time.Minute))
	n := maxPendingReports + 100
	for i := range n {
		if err := q.Report(fmt.Sprintf("logs:k%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	q.mu.Lock()
	pending := len(q.pending)
	q.mu.Unlock()
	if pending >= maxPendingReports || nc.Stats().OutMsgs < maxPendingReports {
		t.Errorf("%d reports pending, %d messages sent; want them sent at %d", pending, nc.Stats().OutMsgs, maxPendingReports)
	}
}

// serviceTimeout sets the quota timeout of agents whose test needs the
// service's answer: the default (250ms) is ample on an idle machine, but
// a request under -race on a loaded one may take longer, which would turn
// the answer under test into a fallback.
func serviceTimeout() Option { return WithTimeout(10 * time.Second) }

// TestTakeService drives Take and Report through the real quota service,
// configured by namespaces put into the KV configuration bucket: OK,
// OK_WAIT (Take waits), REJECTED as a *RejectedError, no_bucket, a peek, and
// reports that charge the bucket. The service's clock stands still: on
// the real one, a second between two takes on a loaded machine refilled
// alice's bucket (1/s), and a take the test expects to wait or be
// refused was admitted.
func TestTakeService(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	at := time.Now()
	quotatest.StartClocked(t, natstest.Conn(t, s), func() time.Time { return at }, map[string]string{
		"logins": `{"buckets": {"alice": {"size": 2, "fill_rate": 1, "wait_timeout": "2s", "max_debt": "2s"}}}`,
		"batch":  `{"default_bucket": {"size": 100, "fill_rate": 0.01, "max_tokens_per_request": 100}}`,
		"shed":   `{"default_bucket": {"size": 4, "fill_rate": 0.01, "max_tokens_per_request": 4, "soft_limit": 0.25, "critical_reserve": 0.5}}`,
	})
	q := newClient(t, natstest.Conn(t, s), WithReportInterval(20*time.Millisecond), serviceTimeout())
	ctx := context.Background()

	for i := range 2 {
		res, err := q.Take(ctx, "logins:alice", 1)
		if err != nil || res.Fallback || res.Wait != 0 || res.Limit != 2 || res.Remaining != int64(1-i) || res.Bucket != "logins:alice" {
			t.Fatalf("take %d = %+v, %v; want OK with %d remaining", i, res, err, 1-i)
		}
	}
	// Empty: the next token is 1s away, within wait_timeout and
	// max_debt. Take waits the answered wait out, on the agent's clock
	// (a client of its own, driven by the test).
	clk := clocktest.At(time.Now())
	qc := newClockedClient(t, natstest.Conn(t, s), clk, serviceTimeout())
	var res Result
	var err error
	waits := clocktest.Drive(t, clk, time.Minute, func() { res, err = qc.Take(ctx, "logins:alice", 1) })
	if err != nil || res.Wait < 100*time.Millisecond || res.Wait > 1100*time.Millisecond {
		t.Fatalf("take on an empty bucket = %+v, %v; want OK_WAIT of about 1s", res, err)
	}
	if !slices.Equal(waits, []time.Duration{res.Wait}) {
		t.Errorf("Take waited %v on the agent's clock; want the answered wait, %v", waits, res.Wait)
	}
	// Now in debt: with no wait allowed it is REJECTED "no_wait".
	_, err = q.Take(ctx, "logins:alice", 1, WithMaxWait(0))
	var qe *RejectedError
	if !errors.As(err, &qe) || qe.Reason != "no_wait" || qe.Fallback || qe.RetryAfter <= 0 || qe.Bucket != "logins:alice" {
		t.Fatalf("take with max wait 0 = %v; want REJECTED no_wait with a retry_after", err)
	}
	// A context that cannot wait the answer is REJECTED rather than
	// answered with a wait it cannot sit out. The next token is 2s away
	// (the bucket is in debt); the deadline leaves the request time to
	// be answered (a deadline of a few ms ended before the answer came
	// on a loaded machine, and Take then rightly returned the context's
	// error).
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	_, err = q.Take(short, "logins:alice", 1)
	cancel()
	if !errors.As(err, &qe) || qe.Reason != "timeout" {
		t.Fatalf("take under a 400ms deadline = %v; want REJECTED timeout", err)
	}
	if _, err := q.Take(ctx, "nosuch:x", 1); !errors.As(err, &qe) || qe.Reason != "no_bucket" {
		t.Fatalf("unknown namespace: %v; want REJECTED no_bucket", err)
	}

	// Past the soft limit decisions warn; with half the bucket reserved
	// for CRITICAL requests, a SHEDDABLE one is refused first.
	if res, err := q.Take(ctx, "shed:x", 2, Sheddable()); err != nil || res.Warning != "soft_limit" {
		t.Fatalf("2 of 4 past a soft limit of 25%%: %+v, %v; want OK with the warning", res, err)
	}
	if _, err := q.Take(ctx, "shed:x", 1, Sheddable()); !errors.As(err, &qe) || qe.Reason != "reserved" {
		t.Fatalf("sheddable take into the reserve: %v; want REJECTED reserved", err)
	}
	if _, err := q.Take(ctx, "shed:x", 1); err != nil {
		t.Fatalf("critical take into the reserve: %v", err)
	}

	// Reports charge after the fact: a peek sees them.
	peek, err := q.Take(ctx, "batch:job1", 0)
	if err != nil || peek.Remaining < 99 {
		t.Fatalf("peek = %+v, %v; want about 100 remaining", peek, err)
	}
	for range 4 {
		if err := q.Report("batch:job1", 10); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 30*time.Second, "40 reported tokens charged", func() bool {
		p, err := q.Take(ctx, "batch:job1", 0)
		return err == nil && p.Remaining <= peek.Remaining-40 && p.Remaining >= peek.Remaining-41
	})

	st, ok := statusOf(q, "logins")
	if !ok || st.CircuitOpen || st.Failures != 0 || st.LastError != nil || st.LastAnswer.IsZero() {
		t.Errorf("status = %+v, want the service answering", st)
	}
}

// TestReportFlushedOnClose: reports still gathered when the agent closes
// are sent by Close, not lost.
func TestReportFlushedOnClose(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	quotatest.Start(t, natstest.Conn(t, s), map[string]string{
		"batch": `{"default_bucket": {"size": 100, "fill_rate": 0.01, "max_tokens_per_request": 100}}`,
	})
	q := newClient(t, natstest.Conn(t, s), WithReportInterval(time.Minute), serviceTimeout())
	if err := q.Report("batch:x", 30); err != nil {
		t.Fatal(err)
	}
	if err := q.Report("batch:y", 5); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	r := newClient(t, natstest.Conn(t, s), serviceTimeout())
	poll.Until(t, 30*time.Second, "both reports charged the shared default bucket", func() bool {
		res, err := r.Take(context.Background(), "batch:z", 0)
		return err == nil && res.Remaining == 65
	})
}

// TestTakeFallbackRecovery: when the quota service goes away, Take falls
// back to the local bucket and opens the circuit; once the service is
// back, the probe after the cooldown closes it again.
func TestTakeFallbackRecovery(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	svc := quotatest.Start(t, natstest.Conn(t, s), map[string]string{
		"api": `{"dynamic_bucket_template": {"size": 1000, "fill_rate": 1000}}`,
	})
	q := newClient(t, natstest.Conn(t, s), WithFallback("api", 100, 10), WithCircuit(2, 200*time.Millisecond), serviceTimeout())
	ctx := context.Background()
	if res, err := q.Take(ctx, "api:k", 1); err != nil || res.Fallback || res.Limit != 1000 {
		t.Fatalf("service up: %+v, %v", res, err)
	}
	svc.Stop()
	for i := range 3 {
		res, err := q.Take(ctx, "api:k", 1)
		if err != nil || !res.Fallback || res.Limit != 10 {
			t.Fatalf("service down, take %d: %+v, %v; want the fallback", i, res, err)
		}
	}
	if st, _ := statusOf(q, "api"); !st.CircuitOpen {
		t.Fatalf("status with the service down = %+v, want the circuit open", st)
	}
	if err := svc.Restart(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "service answers again after the cooldown", func() bool {
		res, err := q.Take(ctx, "api:k", 1)
		return err == nil && !res.Fallback
	})
	if st, _ := statusOf(q, "api"); st.CircuitOpen || st.Failures != 0 || st.LastError != nil {
		t.Errorf("status after recovery = %+v, want the circuit closed", st)
	}
}

// TestTakePartitioned: with two partitions behind the nats-server subject
// mapping (as `allot up --quota-partitions 2` runs them), Take and Report
// on the tokenized subjects reach the partition that owns each
// namespace, and each partition keeps its own buckets.
func TestTakePartitioned(t *testing.T) {
	t.Parallel()
	srv, err := embed.Start(embed.Options{StoreDir: t.TempDir(), Mappings: quotaserver.Mappings("root", 2)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc := natstest.Conn(t, srv)
	// nats-server's partition(2,1) puts qb0 on partition 0, qb1 on 1.
	doc := `{"dynamic_bucket_template": {"size": 5, "fill_rate": 0.01, "max_tokens_per_request": 5}}`
	svc, err := quotatest.NewPartitioned(nc, 2, map[string]string{"qb0": doc, "qb1": doc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	q := newClient(t, natstest.Conn(t, srv), WithReportInterval(10*time.Millisecond), serviceTimeout())
	ctx := context.Background()
	for _, b := range []string{"qb0:x", "qb1:x"} {
		if res, err := q.Take(ctx, b, 2); err != nil || res.Remaining != 3 || res.Fallback {
			t.Fatalf("take 2 of %s = %+v, %v", b, res, err)
		}
		if err := q.Report(b, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"qb0:x", "qb1:x"} {
		poll.Until(t, 30*time.Second, b+" charged by the report", func() bool {
			res, err := q.Take(ctx, b, 0)
			return err == nil && res.Remaining == 2
		})
	}
	st := svc.Stats()
	for p, s := range st {
		if s.Takes < 2 || s.Reports != 1 || s.Buckets != 1 || s.Forwarded != 0 {
			t.Errorf("partition %d: %+v, want its own namespace's takes, report and bucket", p, s)
		}
	}
}

// BenchmarkTake is one Take against the real quota service over loopback
// (with parallel callers), next to a bare request of the same payload and
// header to an echo responder on the same connection; the difference is
// the agent's and the service's cost per decision.
func BenchmarkTake(b *testing.B) {
	s := natstest.Server(b)
	nc := natstest.Conn(b, s)
	quotatest.Start(b, nc, map[string]string{
		"bench": `{"dynamic_bucket_template": {"size": 1000000000, "fill_rate": 1000000000, "max_tokens_per_request": 10}}`,
	})
	q := newClient(b, natstest.Conn(b, s))
	ctx := context.Background()
	b.Run("Take", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := q.Take(ctx, "bench:k", 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("Echo", func(b *testing.B) {
		echo, err := nc.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = echo.Unsubscribe() }()
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		one := int64(1)
		header := nats.Header{wire.HeaderContentType: []string{wire.ContentProtobuf}}
		payload, _ := proto.Marshal(&allotpb.QuotaTakeRequest{Bucket: "bench:k", Tokens: &one})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				msg := &nats.Msg{Subject: "bench.echo", Header: header, Data: payload}
				if _, err := q.nc.RequestMsg(msg, time.Second); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestQuotaShadow: through the real quota service, a namespace in shadow
// mode lets every Take proceed at once, and the client counts per
// namespace what the bucket refused or made wait.
func TestQuotaShadow(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	quotatest.Start(t, natstest.Conn(t, s), map[string]string{
		"logins": `{"shadow": true, "buckets": {"alice": {"size": 2, "fill_rate": 0.01, "wait_timeout": "0s", "max_tokens_per_request": 2}}}`,
	})
	q := newClient(t, natstest.Conn(t, s), serviceTimeout())
	for i := range 5 {
		res, err := q.Take(context.Background(), "logins:alice", 1)
		if err != nil || !res.Shadow || res.Wait != 0 || res.WouldRefuse != (i >= 2) {
			t.Fatalf("take %d in shadow mode: %+v, %v", i, res, err)
		}
		if i >= 2 && res.ShadowReason != "no_wait" {
			t.Errorf("take %d: shadow reason %q, want no_wait (wait_timeout 0s)", i, res.ShadowReason)
		}
	}
	st, _ := statusOf(q, "logins")
	if !st.Shadow || st.ShadowAdmitted != 5 || st.WouldRefuse != 3 {
		t.Errorf("quota namespace status %+v; want shadow, 5 admitted, 3 would refuse", st)
	}
}
