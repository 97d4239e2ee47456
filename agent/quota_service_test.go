package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/quotatest"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/quotaserver"
)

// serviceTimeout sets the quota timeout of agents whose test needs the
// service's answer: the default (250ms) is ample on an idle machine, but
// a request under -race on a loaded one may take longer, which would turn
// the answer under test into a fallback.
func serviceTimeout() Option { return WithQuotaTimeout(10 * time.Second) }

// TestTakeService drives Take and Report through the real quota service,
// configured by namespaces put into the KV configuration bucket: OK,
// OK_WAIT (Take waits), REJECTED as a *QuotaError, no_bucket, a peek, and
// reports that charge the bucket.
func TestTakeService(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	quotatest.Start(t, natstest.Conn(t, s), map[string]string{
		"logins": `{"buckets": {"alice": {"size": 2, "fill_rate": 1, "wait_timeout": "2s", "max_debt": "2s"}}}`,
		"batch":  `{"default_bucket": {"size": 100, "fill_rate": 0.01, "max_tokens_per_request": 100}}`,
		"shed":   `{"default_bucket": {"size": 4, "fill_rate": 0.01, "max_tokens_per_request": 4, "soft_limit": 0.25, "critical_reserve": 0.5}}`,
	})
	a := newAgent(t, natstest.Conn(t, s), WithQuotaReportInterval(20*time.Millisecond), serviceTimeout())
	ctx := context.Background()

	for i := range 2 {
		res, err := a.Take(ctx, "logins:alice", 1)
		if err != nil || res.Fallback || res.Wait != 0 || res.Limit != 2 || res.Remaining != int64(1-i) || res.Bucket != "logins:alice" {
			t.Fatalf("take %d = %+v, %v; want OK with %d remaining", i, res, err, 1-i)
		}
	}
	// Empty: the next token is up to 1s away, within wait_timeout and
	// max_debt.
	start := time.Now()
	res, err := a.Take(ctx, "logins:alice", 1)
	took := time.Since(start)
	if err != nil || res.Wait < 100*time.Millisecond || res.Wait > 1100*time.Millisecond {
		t.Fatalf("take on an empty bucket = %+v, %v; want OK_WAIT of about 1s", res, err)
	}
	if took < res.Wait-50*time.Millisecond {
		t.Errorf("Take returned after %v, before the answered wait %v", took, res.Wait)
	}
	// Now in debt: with no wait allowed it is REJECTED "timeout".
	_, err = a.Take(ctx, "logins:alice", 1, WithMaxWait(0))
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Reason != "timeout" || qe.Fallback || qe.RetryAfter <= 0 || qe.Bucket != "logins:alice" {
		t.Fatalf("take with max wait 0 = %v; want REJECTED timeout with a retry_after", err)
	}
	// A context that cannot wait the answer is REJECTED rather than
	// answered with a wait it cannot sit out. The next token is about 1s
	// away; the deadline leaves the request time to be answered (a
	// deadline of a few ms ended before the answer came on a loaded
	// machine, and Take then rightly returned the context's error).
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	_, err = a.Take(short, "logins:alice", 1)
	cancel()
	if !errors.As(err, &qe) || qe.Reason != "timeout" {
		t.Fatalf("take under a 400ms deadline = %v; want REJECTED timeout", err)
	}
	if _, err := a.Take(ctx, "nosuch:x", 1); !errors.As(err, &qe) || qe.Reason != "no_bucket" {
		t.Fatalf("unknown namespace: %v; want REJECTED no_bucket", err)
	}

	// Past the soft limit decisions warn; with half the bucket reserved
	// for CRITICAL requests, a SHEDDABLE one is refused first.
	if res, err := a.Take(ctx, "shed:x", 2, Sheddable()); err != nil || res.Warning != "soft_limit" {
		t.Fatalf("2 of 4 past a soft limit of 25%%: %+v, %v; want OK with the warning", res, err)
	}
	if _, err := a.Take(ctx, "shed:x", 1, Sheddable()); !errors.As(err, &qe) || qe.Reason != "reserved" {
		t.Fatalf("sheddable take into the reserve: %v; want REJECTED reserved", err)
	}
	if _, err := a.Take(ctx, "shed:x", 1); err != nil {
		t.Fatalf("critical take into the reserve: %v", err)
	}

	// Reports charge after the fact: a peek sees them.
	peek, err := a.Take(ctx, "batch:job1", 0)
	if err != nil || peek.Remaining < 99 {
		t.Fatalf("peek = %+v, %v; want about 100 remaining", peek, err)
	}
	for range 4 {
		if err := a.Report("batch:job1", 10); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "40 reported tokens charged", func() bool {
		p, err := a.Take(ctx, "batch:job1", 0)
		return err == nil && p.Remaining <= peek.Remaining-40 && p.Remaining >= peek.Remaining-41
	})

	st, ok := quotaStatusOf(a, "logins")
	if !ok || st.Source != SourceQuotaService || st.CircuitOpen || st.QuotaFailures != 0 || st.LastError != nil || st.LastRefresh.IsZero() {
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
	a := newAgent(t, natstest.Conn(t, s), WithQuotaReportInterval(time.Minute), serviceTimeout())
	if err := a.Report("batch:x", 30); err != nil {
		t.Fatal(err)
	}
	if err := a.Report("batch:y", 5); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := newAgent(t, natstest.Conn(t, s), serviceTimeout())
	eventually(t, 5*time.Second, "both reports charged the shared default bucket", func() bool {
		res, err := b.Take(context.Background(), "batch:z", 0)
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
	a := newAgent(t, natstest.Conn(t, s), WithQuotaFallback("api", 100, 10), WithQuotaCircuit(2, 200*time.Millisecond), serviceTimeout())
	ctx := context.Background()
	if res, err := a.Take(ctx, "api:k", 1); err != nil || res.Fallback || res.Limit != 1000 {
		t.Fatalf("service up: %+v, %v", res, err)
	}
	svc.Stop()
	for i := range 3 {
		res, err := a.Take(ctx, "api:k", 1)
		if err != nil || !res.Fallback || res.Limit != 10 {
			t.Fatalf("service down, take %d: %+v, %v; want the fallback", i, res, err)
		}
	}
	if st, _ := quotaStatusOf(a, "api"); !st.CircuitOpen || st.Source != SourceFallback {
		t.Fatalf("status with the service down = %+v, want the circuit open", st)
	}
	if err := svc.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "service answers again after the cooldown", func() bool {
		res, err := a.Take(ctx, "api:k", 1)
		return err == nil && !res.Fallback
	})
	if st, _ := quotaStatusOf(a, "api"); st.CircuitOpen || st.Source != SourceQuotaService || st.QuotaFailures != 0 || st.LastError != nil {
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
	a := newAgent(t, natstest.Conn(t, srv), WithQuotaReportInterval(10*time.Millisecond), serviceTimeout())
	ctx := context.Background()
	for _, b := range []string{"qb0:x", "qb1:x"} {
		if res, err := a.Take(ctx, b, 2); err != nil || res.Remaining != 3 || res.Fallback {
			t.Fatalf("take 2 of %s = %+v, %v", b, res, err)
		}
		if err := a.Report(b, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"qb0:x", "qb1:x"} {
		eventually(t, 5*time.Second, b+" charged by the report", func() bool {
			res, err := a.Take(ctx, b, 0)
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
	a, err := New(natstest.Conn(b, s), WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	ctx := context.Background()
	b.Run("Take", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := a.Take(ctx, "bench:k", 1); err != nil {
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
		payload, _ := proto.Marshal(&allotpb.QuotaTakeRequest{Bucket: "bench:k", Tokens: &one})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				msg := &nats.Msg{Subject: "bench.echo", Header: a.pbHeader, Data: payload}
				if _, err := a.nc.RequestMsg(msg, time.Second); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
