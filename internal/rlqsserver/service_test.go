package rlqsserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/rlqs"
	"github.com/allot/allot/internal/rlqsserver"
	"github.com/allot/allot/internal/rls"
	"github.com/allot/allot/internal/sources"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

const (
	capacity  = 20.0
	reporting = 100 * time.Millisecond
)

// world is what every simulated Envoy enforces, checked each time one
// applies an assignment: the rates in force add up to at most capacity.
type world struct {
	mu         sync.Mutex
	envoys     []*envoy
	checks     int
	violations []string
}

func (w *world) check(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sum := 0.0
	for _, e := range w.envoys {
		sum += e.enforcing(now, "api")
	}
	w.checks++
	if sum > capacity*(1+1e-9) {
		w.violations = append(w.violations, fmt.Sprintf("%v: the Envoys enforce %g in all, above %g", now.Format(time.StampMilli), sum, capacity))
	}
}

// assignment is what an Envoy enforces for a bucket.
type assignment struct {
	rate  float64
	until time.Time
}

// envoy acts as Envoy's rate_limit_quota filter does: it reports each
// bucket's usage every reporting interval, and at once after an
// assignment that changes what it enforces; it admits a bucket's requests
// by the token bucket of its assignment, and every request while a
// bucket has none (no_assignment_behavior ALLOW_ALL).
type envoy struct {
	name   string
	w      *world
	stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel context.CancelFunc
	kick   chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	offered   map[string]float64 // requests per second, by bucket name
	assigned  map[string]assignment
	tokens    map[string]float64
	abandoned map[string]int
	received  map[string]int
}

func startEnvoy(t *testing.T, w *world, client rlqspb.RateLimitQuotaServiceClient, name string) *envoy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := &envoy{name: name, w: w, stream: stream, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{}),
		offered: map[string]float64{}, assigned: map[string]assignment{}, tokens: map[string]float64{},
		abandoned: map[string]int{}, received: map[string]int{}}
	w.mu.Lock()
	w.envoys = append(w.envoys, e)
	w.mu.Unlock()
	go e.report(t)
	go e.receive(t)
	t.Cleanup(func() { cancel(); <-e.done })
	return e
}

func (e *envoy) offer(bucket string, perSecond float64) {
	e.mu.Lock()
	e.offered[bucket] = perSecond
	e.mu.Unlock()
}

// enforcing is the rate e enforces for bucket at now.
func (e *envoy) enforcing(now time.Time, bucket string) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a, ok := e.assigned[bucket]; ok && now.Before(a.until) {
		return a.rate
	}
	return 0
}

func (e *envoy) rate(bucket string) float64 { return e.enforcing(time.Now(), bucket) }

func (e *envoy) count(m map[string]int, bucket string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return m[bucket]
}

// report sends the usage of every bucket offered load, as often as Envoy
// does; the first report of the stream names the domain.
func (e *envoy) report(t *testing.T) {
	defer close(e.done)
	last := time.Now()
	backlog := map[string]float64{}
	first := true
	tk := time.NewTicker(reporting)
	defer tk.Stop()
	for {
		select {
		case <-e.stream.Context().Done():
			return
		case <-tk.C:
		case <-e.kick:
		}
		now := time.Now()
		dt := now.Sub(last)
		last = now
		msg := &rlqspb.RateLimitQuotaUsageReports{}
		if first {
			msg.Domain, first = "edge", false
		}
		e.mu.Lock()
		for name, offered := range e.offered {
			backlog[name] += offered * dt.Seconds()
			n := math.Floor(backlog[name])
			backlog[name] -= n
			allowed := n
			if a, ok := e.assigned[name]; ok && now.Before(a.until) {
				e.tokens[name] = min(e.tokens[name]+a.rate*dt.Seconds(), math.Max(math.Ceil(a.rate), 1))
				allowed = min(n, math.Floor(e.tokens[name]))
				e.tokens[name] -= allowed
			}
			msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"name": name}},
				TimeElapsed:        durationpb.New(dt),
				NumRequestsAllowed: uint64(allowed),
				NumRequestsDenied:  uint64(n - allowed),
			})
		}
		e.mu.Unlock()
		if len(msg.BucketQuotaUsages) == 0 && msg.Domain == "" {
			continue
		}
		if err := e.stream.Send(msg); err != nil {
			return
		}
	}
}

// receive applies the server's actions.
func (e *envoy) receive(t *testing.T) {
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			return
		}
		if err := resp.ValidateAll(); err != nil {
			t.Errorf("%s: an invalid response: %v", e.name, err)
		}
		now := time.Now()
		changed := false
		e.mu.Lock()
		for _, a := range resp.GetBucketAction() {
			name := a.GetBucketId().GetBucket()["name"]
			if a.GetAbandonAction() != nil {
				delete(e.assigned, name)
				e.abandoned[name]++
				continue
			}
			qa := a.GetQuotaAssignmentAction()
			next := assignment{rate: rlqs.Rate(qa.GetRateLimitStrategy()), until: now.Add(qa.GetAssignmentTimeToLive().AsDuration())}
			if old, ok := e.assigned[name]; !ok || old.rate != next.rate {
				changed = true
			}
			e.assigned[name] = next
			e.received[name]++
		}
		e.mu.Unlock()
		e.w.check(now)
		if changed {
			select {
			case e.kick <- struct{}{}:
			default:
			}
		}
	}
}

// rig is a NATS server, a configuration bucket, a coordinator and the
// quota service over gRPC.
type rig struct {
	kv      jetstream.KeyValue
	watcher *configkv.Watcher
	client  rlqspb.RateLimitQuotaServiceClient
	svc     *rlqsserver.Service
}

func startRig(t *testing.T, buckets rlqs.Options) *rig {
	t.Helper()
	srv := natstest.Server(t)
	nc := natstest.Conn(t, srv)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := configkv.OpenBucket(ctx, js, configkv.DefaultBucket, true)
	if err != nil {
		t.Fatal(err)
	}
	w := configkv.NewWatcher(kv, nil, quiet())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	coord, err := coordinator.New(natstest.Conn(t, srv), coordinator.Options{Templates: sources.WatchedTemplates(w), RoundInterval: 5 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := coord.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coord.Stop)
	svc, err := rlqsserver.New(natstest.Conn(t, srv), rlqsserver.Options{Templates: w.Current, Buckets: buckets, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := rls.Listen("127.0.0.1:0", quiet())
	if err != nil {
		t.Fatal(err)
	}
	svc.Register(s.GRPC())
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(sctx) }()
	t.Cleanup(func() { stop(); <-served })
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rig{kv: kv, watcher: w, client: rlqspb.NewRateLimitQuotaServiceClient(conn), svc: svc}
}

func (r *rig) putTemplate(t *testing.T, name, doc string) {
	t.Helper()
	if _, err := r.kv.Put(context.Background(), config.Key(name), []byte(doc)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "template "+name, func() bool {
		for _, tm := range r.watcher.Current().Templates() {
			if tm.Name == name {
				return true
			}
		}
		return false
	})
}

// TestEnvoysShareTheCapacity: three simulated Envoys stream usage of
// bucket {name: api}, which a template gives 20 per second. Their
// assignments always add up to at most 20, follow a shift of demand from
// one Envoy to another, and a bucket that stops seeing requests is
// abandoned; a bucket no template names gets no assignment.
func TestEnvoysShareTheCapacity(t *testing.T) {
	r := startRig(t, rlqs.Options{Decay: 300 * time.Millisecond, AbandonAfter: time.Second})
	r.putTemplate(t, "rlqs-api", fmt.Sprintf(`{"identifier_glob":"rlqs/edge/name=api","capacity":%g,"algorithm":{"kind":"FAIR_SHARE","lease_length":"3s","refresh_interval":"200ms"}}`, capacity))
	w := &world{}
	a, b, c := startEnvoy(t, w, r.client, "a"), startEnvoy(t, w, r.client, "b"), startEnvoy(t, w, r.client, "c")
	a.offer("api", 30)
	b.offer("api", 2)
	c.offer("api", 2)
	c.offer("other", 10)
	poll.Until(t, 30*time.Second, "a to get most of the capacity", func() bool {
		return a.rate("api") >= 10 && b.rate("api") >= 1 && c.rate("api") >= 1
	})
	// Demand moves from a to b.
	a.offer("api", 2)
	b.offer("api", 30)
	poll.Until(t, 30*time.Second, "b to get most of the capacity", func() bool {
		return b.rate("api") >= 10 && a.rate("api") <= 4
	})
	// c stops sending requests to api: its bucket is abandoned.
	c.offer("api", 0)
	poll.Until(t, 30*time.Second, "c's api bucket to be abandoned", func() bool { return c.count(c.abandoned, "api") == 1 })
	if n := c.count(c.received, "other"); n != 0 {
		t.Errorf("%d assignments for a bucket no template names", n)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.checks < 10 || len(w.violations) > 0 {
		t.Errorf("%d checks; violations: %v", w.checks, w.violations)
	}
	if st := r.svc.Stats(); st.Streams != 3 || st.Open != 3 || st.Assignments == 0 || st.Abandons != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestFirstReportNamesTheDomain: a stream whose first report has no
// domain is refused.
func TestFirstReportNamesTheDomain(t *testing.T) {
	r := startRig(t, rlqs.Options{})
	stream, err := r.client.StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.InvalidArgument || errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
}
