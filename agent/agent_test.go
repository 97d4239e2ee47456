package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testTemplate is a FAIR_SHARE template refreshed every 300ms whose
// leases last a minute: a test that reads what a lease in force admits
// must not see it lapse because one refresh's answer came late on a
// loaded machine (a 2 s lease did, and the agent applied its safe
// capacity). Tests of what happens once a lease ends use
// expiringTemplate.
func testTemplate(glob string, capacity float64) *config.Template {
	return &config.Template{
		Name: "t-" + glob, Glob: glob, Capacity: capacity,
		Algorithm:       allotpb.Algorithm_FAIR_SHARE,
		LeaseLength:     time.Minute,
		RefreshInterval: 300 * time.Millisecond,
	}
}

// expiringTemplate is testTemplate with 2 s leases, for the tests that
// wait for a lease to end (or for a successor coordinator to learn until
// its predecessor's leases have ended).
func expiringTemplate(glob string, capacity float64) *config.Template {
	t := testTemplate(glob, capacity)
	t.LeaseLength = 2 * time.Second
	return t
}

// startCoordinator starts a real coordinator on nc serving tmpls.
func startCoordinator(t *testing.T, nc *nats.Conn, tmpls ...*config.Template) *coordinator.Coordinator {
	t.Helper()
	return coordtest.Start(t, nc, coordinator.Options{
		Node:          "root",
		RoundInterval: 10 * time.Millisecond,
		Templates:     sources.StaticTemplates(config.NewSet(1, tmpls, nil)),
		Logger:        quiet,
	})
}

func newAgent(t *testing.T, nc *nats.Conn, opts ...Option) *Agent {
	t.Helper()
	a, err := New(nc, append([]Option{WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// TestFairShares: against a real coordinator, two agents sharing a
// resource of 100/s converge to their fair shares, with explicit and with
// automatic (demand-estimated) wants.
func TestFairShares(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	startCoordinator(t, natstest.Conn(t, s), testTemplate("res", 100), testTemplate("auto", 100))

	// A minute to answer: the status read below must not show a refresh
	// that timed out on a loaded machine.
	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"), WithRequestTimeout(time.Minute))
	b := newAgent(t, natstest.Conn(t, s), WithClientID("b"), WithRequestTimeout(time.Minute))

	ra, err := a.Rate("res", WithWants(80))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Rate("res", WithWants(80))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 15*time.Second, "explicit wants 80+80 of 100 should give 50 each", func() bool {
		return math.Abs(ra.Capacity()-50) < 0.5 && math.Abs(rb.Capacity()-50) < 0.5
	})
	st := ra.Status()
	if st.Source != SourceLease || !st.Leased || st.Expiry.Before(time.Now()) || st.LastError != nil {
		t.Errorf("status = %+v, want a valid lease and no error", st)
	}

	// b wants 30 fixed; a's demand is estimated from 4 goroutines waiting
	// in a closed loop, which must discover the remaining 70.
	xa, err := a.Rate("auto")
	if err != nil {
		t.Fatal(err)
	}
	xb, err := b.Rate("auto", WithWants(30))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for xa.Wait(ctx) == nil {
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	poll.Until(t, 20*time.Second, "auto wants should converge to 70 next to a fixed 30", func() bool {
		return math.Abs(xb.Capacity()-30) < 0.5 && xa.Capacity() > 68 && xa.Capacity() <= 70.5
	})
	if w := xa.Status().Wants; !(w >= 68) || math.IsInf(w, 0) {
		t.Errorf("estimated wants = %v, want at least 68 and finite", w)
	}
}

// TestOutage: the coordinator stops, leases expire and agents fall back to
// their mode; when a coordinator returns they get leases again.
func TestOutage(t *testing.T) {
	t.Parallel()
	tmpl := expiringTemplate("res", 100)
	tmpl.Floor = config.FloorPolicy{Absolute: 7, HasAbsolute: true, Lease: time.Minute}
	for _, tc := range []struct {
		mode Mode
		src  Source
		want float64
	}{
		{Safe, SourceSafe, 7},
		{Optimistic, SourceOptimistic, 40},
		{Pessimistic, SourcePessimistic, 0},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			c := startCoordinator(t, nc, tmpl)
			var changes atomic.Int32
			a := newAgent(t, natstest.Conn(t, s), WithMode(tc.mode), WithOnChange(func(Status) { changes.Add(1) }))
			r, err := a.Rate("res", WithWants(40))
			if err != nil {
				t.Fatal(err)
			}
			poll.Until(t, 10*time.Second, "first lease", func() bool {
				st := r.Status()
				return st.Source == SourceLease && st.Capacity == 40
			})
			st := r.Status()
			if st.SafeCapacity != 7 || !st.SafeKnown {
				t.Errorf("safe capacity = %v (known %v), want 7", st.SafeCapacity, st.SafeKnown)
			}
			expiry := r.Expiry()

			c.Stop()
			poll.Until(t, 10*time.Second, "fallback after the lease expired", func() bool {
				st := r.Status()
				return st.Source == tc.src && st.Capacity == tc.want && !st.Leased
			})
			if time.Now().Before(expiry) {
				t.Errorf("fell back at %v, before the lease expired at %v", time.Now(), expiry)
			}
			if err := a.LastError(); !errors.Is(err, nats.ErrNoResponders) {
				t.Errorf("LastError = %v, want no responders", err)
			}
			if tc.want == 0 && r.Allow() {
				t.Error("Allow at capacity 0 = true")
			}

			startCoordinator(t, nc, tmpl)
			poll.Until(t, 10*time.Second, "recovery when the coordinator returns", func() bool {
				st := r.Status()
				return st.Source == SourceLease && st.Capacity == 40 && st.LastError == nil
			})
			if changes.Load() < 2 {
				t.Errorf("OnChange called %d times, want at least 2", changes.Load())
			}
		})
	}
}

// TestSafeCapacityEnds: in Safe mode, once the lease has ended without an
// answer, the agent runs on its safe capacity (the floor) until the end
// the coordinator told, then on nothing: the coordinator counts the floor
// only until then, so a client cut off for longer must not use it. A new
// coordinator brings a lease back, and the agent reports the floor it
// holds. The agent runs on a clock the test moves: the safe capacity
// lasts a second after the lease (floor 3s, lease 2s), and on the real
// clock a loop or a test late by that second on a loaded machine went
// from the lease straight to nothing.
func TestSafeCapacityEnds(t *testing.T) {
	t.Parallel()
	tmpl := expiringTemplate("res", 100)
	tmpl.Floor = config.FloorPolicy{Share: 0.5, Lease: 3 * time.Second}
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	c := startCoordinator(t, nc, tmpl)
	clk := clocktest.At(time.Now()) // stopped: no refresh is due, the lease holds
	a := newAgent(t, natstest.Conn(t, s), WithClock(clk))
	r, err := a.Rate("res", WithWants(40))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "first lease", func() bool { return r.Status().Source == SourceLease })
	st := r.Status()
	// Alone, its fair share is the capacity: its floor is half of it, but
	// never more than its lease.
	if st.SafeCapacity != 40 || st.SafeUntil.IsZero() || !st.SafeUntil.After(st.Expiry) {
		t.Fatalf("safe capacity %v until %v (lease until %v), want 40 until after the lease", st.SafeCapacity, st.SafeUntil, st.Expiry)
	}
	c.Stop()
	until := st.SafeUntil
	// ranAt moves the clock to at and waits until the agent's loop has
	// applied it: every timer due by then fired, and the loop armed its
	// next one after it.
	ranAt := func(at time.Time, what string) {
		t.Helper()
		clk.Set(at)
		poll.Until(t, 10*time.Second, what, func() bool {
			n, first := clk.Pending()
			return n > 0 && first.After(at)
		})
	}
	ranAt(st.Expiry, "the loop at the lease's end")
	if st := r.Status(); st.Source != SourceSafe || st.Capacity != 40 || st.Leased {
		t.Fatalf("at the lease's end: %+v, want the safe capacity 40", st)
	}
	ranAt(until.Add(-time.Millisecond), "the loop just before the safe capacity's end")
	if st := r.Status(); st.Source != SourceSafe || st.Capacity != 40 {
		t.Fatalf("before the safe capacity's end %v: %+v, want it still in force", until, st)
	}
	ranAt(until, "the loop at the safe capacity's end")
	if st := r.Status(); st.Source != SourceNone || st.Capacity != 0 {
		t.Fatalf("at the safe capacity's end: %+v, want nothing", st)
	}
	if r.Allow() {
		t.Error("Allow after the safe capacity ended = true")
	}
	startCoordinator(t, nc, tmpl)
	// The clock follows the real one again (never back): the agent
	// refreshes, and the new coordinator's lease is in force on it.
	poll.Until(t, 20*time.Second, "a lease again", func() bool {
		clk.Set(time.Now())
		return r.Status().Source == SourceLease
	})
}

// TestGaugeNeverExceedsLimit runs 16 goroutines against a gauge of 5
// granted by a real coordinator.
func TestGaugeNeverExceedsLimit(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	startCoordinator(t, natstest.Conn(t, s), testTemplate("conns", 5))
	a := newAgent(t, natstest.Conn(t, s))
	g, err := a.Gauge("conns")
	if err != nil {
		t.Fatal(err)
	}
	var inFlight, peak atomic.Int32
	// The goroutines run until the test has seen enough work, not for a
	// fixed time: a loaded machine may take seconds for the first lease.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var done atomic.Int64
	for range 16 {
		wg.Go(func() {
			for {
				err := g.Do(ctx, 1, func(context.Context) error {
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(time.Millisecond)
					inFlight.Add(-1)
					return nil
				})
				if err != nil {
					return
				}
				done.Add(1)
			}
		})
	}
	// 16 goroutines waiting for 5 slots: the estimated demand reaches 5.
	ok := poll.Ok(time.Minute, func() bool {
		st := g.Status()
		return done.Load() >= 1000 && st.Capacity == 5 && st.Wants >= 5
	})
	cancel()
	wg.Wait()
	if p := peak.Load(); p > 5 {
		t.Errorf("peak in flight %d exceeds the limit 5", p)
	}
	if !ok {
		t.Errorf("after %d operations, status = %+v; want 1000 operations, capacity 5 and estimated wants >= 5", done.Load(), g.Status())
	}
	t.Logf("peak %d, %d operations", peak.Load(), done.Load())
}

// fakeCoordinator answers GetCapacity with a fixed lease; tests change its
// behaviour through the fields.
type fakeCoordinator struct {
	mu       sync.Mutex
	capacity float64
	term     uint64
	errCode  int
	termOf   func(*allotpb.GetCapacityRequest) uint64 // if set, the term of each reply
	delay    time.Duration                            // before answering a GetCapacity
	arrived  chan struct{}                            // if set, signalled when a GetCapacity arrives
	requests []*allotpb.GetCapacityRequest
	released []*allotpb.ReleaseCapacityRequest
	// events: "get" when a GetCapacity arrives, "answer" just before it is
	// answered, "release <ids>" when a ReleaseCapacity arrives.
	events []string
}

func (f *fakeCoordinator) serve(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.Subscribe("allot.root.capacity.get", func(m *nats.Msg) {
		req := &allotpb.GetCapacityRequest{}
		if err := wire.Unmarshal(wire.EncodingOf(m.Header), m.Data, req); err != nil {
			t.Errorf("fake coordinator: %v", err)
			return
		}
		f.mu.Lock()
		f.requests = append(f.requests, req)
		f.events = append(f.events, "get")
		capacity, term, code, delay, arrived := f.capacity, f.term, f.errCode, f.delay, f.arrived
		if f.termOf != nil {
			term = f.termOf(req)
		}
		f.mu.Unlock()
		if arrived != nil {
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
		time.Sleep(delay)
		f.mu.Lock()
		f.events = append(f.events, "answer")
		f.mu.Unlock()
		reply := nats.NewMsg(m.Reply)
		if code != 0 {
			reply.Header.Set("Nats-Service-Error-Code", "503")
			reply.Header.Set("Nats-Service-Error", "overloaded")
			_ = m.RespondMsg(reply)
			return
		}
		resp := &allotpb.GetCapacityResponse{Term: term}
		for _, rr := range req.GetResource() {
			resp.Response = append(resp.Response, &allotpb.ResourceResponse{
				ResourceId: rr.GetResourceId(),
				Gets: &allotpb.Lease{
					Capacity:        capacity,
					ExpiryTime:      timestamppb.New(time.Now().Add(time.Minute)),
					RefreshInterval: durationpb.New(50 * time.Millisecond),
				},
				SafeCapacity: -1,
			})
		}
		reply.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
		reply.Data, _ = wire.Marshal(wire.Protobuf, resp)
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	rsub, err := nc.Subscribe("allot.root.capacity.release", func(m *nats.Msg) {
		req := &allotpb.ReleaseCapacityRequest{}
		_ = wire.Unmarshal(wire.EncodingOf(m.Header), m.Data, req)
		f.mu.Lock()
		f.released = append(f.released, req)
		f.events = append(f.events, "release "+strings.Join(req.GetResourceId(), ","))
		f.mu.Unlock()
		reply := nats.NewMsg(m.Reply)
		reply.Data, _ = wire.Marshal(wire.Protobuf, &allotpb.ReleaseCapacityResponse{Released: int32(len(req.GetResourceId()))})
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rsub.Unsubscribe() })
	_ = nc.Flush()
}

func (f *fakeCoordinator) set(fn func(*fakeCoordinator)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// eventLog returns the events so far, space-separated.
func (f *fakeCoordinator) eventLog() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.events, " ")
}

// receive waits for a signal on ch.
func receive(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Close during an in-flight GetCapacity waits for its answer before it
// releases: on the agent's connection the release then follows the get,
// so the coordinator cannot take the release first and keep the lease the
// get grants (a phantom lease). Close does not log its own wait as a
// failed refresh either.
func TestCloseWaitsForInFlightRefresh(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	arrived := make(chan struct{}, 1)
	f := &fakeCoordinator{capacity: 10, term: 1, delay: 300 * time.Millisecond, arrived: arrived}
	f.serve(t, natstest.Conn(t, s))
	var logs lockedBuffer
	// A minute to answer: the slow answer (300ms) must come before the
	// request times out however loaded the machine is.
	a, err := New(natstest.Conn(t, s), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithRequestTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Rate("res", WithWants(5)); err != nil {
		t.Fatal(err)
	}
	receive(t, arrived, "the first GetCapacity")
	if err := a.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if got, want := f.eventLog(), "get answer release res"; got != want {
		t.Errorf("coordinator saw %q, want %q", got, want)
	}
	if strings.Contains(logs.String(), "refresh failed") {
		t.Errorf("Close logged a failed refresh:\n%s", logs.String())
	}
}

// WithOnChange's function runs on the agent's goroutine, as documented: a
// function that blocks holds up the agent's loop, not the caller of Rate.
func TestOnChangeRunsOnLoop(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t) // no coordinator: the first change is the initial capacity
	block := make(chan struct{})
	defer close(block)
	called := make(chan string, 1)
	a := newAgent(t, natstest.Conn(t, s), WithOnChange(func(st Status) {
		buf := make([]byte, 64<<10)
		select {
		case called <- fmt.Sprintf("%s %v %s\n%s", st.ResourceID, st.Capacity, st.Source, buf[:runtime.Stack(buf, false)]):
		default:
		}
		<-block
	}))
	created := make(chan error, 1)
	go func() {
		_, err := a.Rate("r", WithInitialCapacity(3))
		created <- err
	}()
	select {
	case err := <-created:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Rate blocked in the OnChange function: it ran on the caller's goroutine")
	}
	select {
	case got := <-called:
		if !strings.HasPrefix(got, "r 3 safe\n") || !strings.Contains(got, "(*Agent).run(") {
			t.Errorf("OnChange called with %s; want r 3 safe, on the agent's loop", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnChange not called for the new resource")
	}
}

// An agent with more resources than one request may carry
// (wire.MaxResourcesPerReq) splits its refreshes and its release; before,
// every refresh failed with 400 and all its leases fell to safe mode.
func TestManyResources(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	tmpl := testTemplate("t/*", 10) // leases of a minute: only a release frees the capacity within the test
	tmpl.RefreshInterval = time.Second
	startCoordinator(t, natstest.Conn(t, s), tmpl)
	// A minute to answer: LastError is read once every resource is
	// leased, and one part of a refresh timing out on a loaded machine is
	// not what the test is about.
	a := newAgent(t, natstest.Conn(t, s), WithClientID("many"), WithRequestTimeout(time.Minute))
	const n = 2*wire.MaxResourcesPerReq + 1
	lims := make([]*RateLimiter, n)
	for i := range lims {
		var err error
		if lims[i], err = a.Rate(fmt.Sprintf("t/%04d", i), WithWants(10)); err != nil {
			t.Fatal(err)
		}
	}
	// Generous: with -race, leasing 2,001 resources (and writing the lease
	// record that lists them) takes about 5 s of CPU, which a machine
	// running two test suites and more gives out slowly.
	poll.Until(t, time.Minute, "every resource leased", func() bool {
		for _, l := range lims {
			if st := l.Status(); st.Source != SourceLease || st.Capacity != 10 {
				return false
			}
		}
		return true
	})
	if err := a.LastError(); err != nil {
		t.Fatalf("LastError = %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	// The last resource was in the last part of the release: its capacity
	// is free for another client at once, not after the minute-long lease.
	b := newAgent(t, natstest.Conn(t, s), WithClientID("next"))
	last, err := b.Rate(fmt.Sprintf("t/%04d", n-1), WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the released capacity granted to another client", func() bool {
		return last.Capacity() == 10
	})
}

// A server with a small maximum payload gets requests that fit it: the
// refresh and the release are split by size as well as by count.
func TestRequestsFitMaxPayload(t *testing.T) {
	t.Parallel()
	s := natstest.MaxPayloadServer(t, 16<<10)
	f := &fakeCoordinator{capacity: 1, term: 1}
	f.serve(t, natstest.Conn(t, s))
	// A minute to answer: Close's release must not time out on a loaded
	// machine.
	a := newAgent(t, natstest.Conn(t, s), WithRequestTimeout(time.Minute))
	const n = 200 // 200-byte ids: about 45 KB of resources
	lims := make([]*RateLimiter, n)
	var err error
	for i := range lims {
		if lims[i], err = a.Rate(fmt.Sprintf("%0200d", i), WithWants(1)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, "every resource leased", func() bool {
		for _, l := range lims {
			if l.Capacity() != 1 {
				return false
			}
		}
		return true
	})
	if err := a.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	released := 0
	for _, req := range f.released {
		released += len(req.GetResourceId())
	}
	if released != n || len(f.released) < 3 {
		t.Errorf("released %d resources in %d requests, want %d in at least 3", released, len(f.released), n)
	}
}

// Closing one limiter gives its lease back at once (another client gets
// the capacity) while the agent's other resources keep theirs; the id can
// be used again.
func TestResourceClose(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	// Leases last a minute: only a release frees the capacity within the test.
	startCoordinator(t, natstest.Conn(t, s), testTemplate("tenant/*", 10), testTemplate("keep", 10))
	// A minute to answer: the Close calls below report their release's
	// error, and a release timing out on a loaded machine is not what the
	// test is about.
	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"), WithRequestTimeout(time.Minute))
	keep, err := a.Rate("keep", WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.Gauge("tenant/1", WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "both leased", func() bool { return keep.Capacity() == 10 && g.Capacity() == 10 })

	if err := g.Close(); err != nil {
		t.Fatalf("Gauge.Close = %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Gauge.Close = %v", err)
	}
	if g.TryAcquire(1) || g.Capacity() != 0 || g.Status().Leased {
		t.Errorf("a closed gauge admitted TryAcquire or reports capacity: %+v", g.Status())
	}
	if err := g.Acquire(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire on a closed gauge = %v, want ErrClosed", err)
	}
	if err := g.SetWants(3); !errors.Is(err, ErrClosed) {
		t.Errorf("SetWants on a closed gauge = %v, want ErrClosed", err)
	}
	if st := a.Status(); len(st) != 1 || st[0].ResourceID != "keep" {
		t.Errorf("agent status lists %v, want keep alone", st)
	}
	b := newAgent(t, natstest.Conn(t, s), WithClientID("b"))
	gb, err := b.Gauge("tenant/1", WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the released capacity granted to another client", func() bool { return gb.Capacity() == 10 })
	first := keep.Expiry()
	poll.Until(t, 10*time.Second, "the other resource keeps refreshing", func() bool {
		return keep.Expiry().After(first) && keep.Capacity() == 10
	})

	// The same id again is a new gauge, which shares with b.
	g2, err := a.Gauge("tenant/1", WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	if g2 == g {
		t.Fatal("Gauge after Close returned the closed gauge")
	}
	poll.Until(t, 10*time.Second, "fair shares of the reopened resource", func() bool {
		return g2.Capacity() == 5 && gb.Capacity() == 5
	})
	if err := keep.Close(); err != nil {
		t.Fatalf("RateLimiter.Close = %v", err)
	}
	if keep.Allow() {
		t.Error("a closed rate limiter allowed an event")
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Agent.Close = %v", err)
	}
	if err := g2.Close(); err != nil {
		t.Errorf("Gauge.Close after Agent.Close = %v, want nil", err)
	}
}

// A limiter closed during an in-flight GetCapacity is released after that
// request's answer, for its resource alone, and is not asked for again.
func TestResourceCloseWaitsForInFlightRefresh(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := &fakeCoordinator{capacity: 10, term: 1}
	f.serve(t, natstest.Conn(t, s))
	// A minute to answer: the slow answer (300ms) must come before the
	// request times out however loaded the machine is.
	a := newAgent(t, natstest.Conn(t, s), WithRequestTimeout(time.Minute))
	keep, err := a.Rate("keep", WithWants(5))
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := a.Rate("tenant", WithWants(5))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "both leased", func() bool { return keep.Capacity() == 10 && tenant.Capacity() == 10 })
	arrived := make(chan struct{}, 1)
	f.set(func(f *fakeCoordinator) { f.delay, f.arrived, f.events = 300*time.Millisecond, arrived, nil })
	receive(t, arrived, "a slow GetCapacity")
	if err := tenant.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	f.set(func(f *fakeCoordinator) { f.delay = 0 })
	if got := f.eventLog(); !strings.Contains(got, "get answer release tenant") {
		t.Errorf("coordinator saw %q, want the release after the answer to the get in flight", got)
	}
	n := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.requests)
	}
	after := n()
	poll.Until(t, 10*time.Second, "another refresh", func() bool { return n() > after })
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, req := range f.requests[after:] {
		if len(req.GetResource()) != 1 || req.GetResource()[0].GetResourceId() != "keep" {
			t.Errorf("a refresh after Close asked for %v, want keep alone", req.GetResource())
		}
	}
}

// The parts of a split refresh are installed one by one: a part answered
// by a lower term than another comes from a deposed coordinator and is
// ignored (its error reported), while the other part's leases count.
func TestSplitRefreshStalePart(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := &fakeCoordinator{capacity: 1, termOf: func(req *allotpb.GetCapacityRequest) uint64 {
		if strings.HasPrefix(req.GetResource()[0].GetResourceId(), "b/") {
			return 1 // the second part reaches a deposed leader
		}
		return 2
	}}
	f.serve(t, natstest.Conn(t, s))
	a := newAgent(t, natstest.Conn(t, s))
	var first, second []*RateLimiter
	for i := range wire.MaxResourcesPerReq {
		l, err := a.Rate(fmt.Sprintf("a/%04d", i), WithWants(1))
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, l)
	}
	for i := range 10 {
		l, err := a.Rate(fmt.Sprintf("b/%04d", i), WithWants(1))
		if err != nil {
			t.Fatal(err)
		}
		second = append(second, l)
	}
	poll.Until(t, 10*time.Second, "the first part leased", func() bool {
		for _, l := range first {
			if l.Status().Source != SourceLease {
				return false
			}
		}
		return true
	})
	poll.Until(t, 10*time.Second, "the stale part reported", func() bool { return errors.Is(a.LastError(), ErrStaleTerm) })
	for _, l := range second {
		if st := l.Status(); st.Leased {
			t.Fatalf("%s holds a lease from a stale term: %+v", st.ResourceID, st)
		}
	}
	if a.Term() != 2 {
		t.Errorf("term %d, want 2", a.Term())
	}
}

// TestProtocol checks what the agent sends and how it treats replies:
// has and wants in requests, error replies, stale terms, release on Close.
func TestProtocol(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := &fakeCoordinator{capacity: 10, term: 5}
	f.serve(t, natstest.Conn(t, s))
	// A minute to answer: Close's release must not time out on a loaded
	// machine.
	a, err := New(natstest.Conn(t, s), WithLogger(quiet), WithClientID("proto-client"), WithRequestTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.Rate("res", WithWants(12), WithPriority(3))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "lease from the fake coordinator", func() bool { return r.Capacity() == 10 })
	poll.Until(t, 30*time.Second, "a refresh reporting has", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		last := f.requests[len(f.requests)-1]
		rr := last.GetResource()[0]
		return len(f.requests) >= 2 && last.GetClientId() == "proto-client" && rr.GetWants() == 12 &&
			rr.GetPriority() == 3 && rr.GetHas().GetCapacity() == 10
	})
	if a.Term() != 5 {
		t.Errorf("term = %d, want 5", a.Term())
	}

	// Error replies are failed refreshes; the lease stays.
	f.set(func(f *fakeCoordinator) { f.errCode = 503 })
	poll.Until(t, 30*time.Second, "service error reported", func() bool {
		var se *ServiceError
		return errors.As(a.LastError(), &se) && se.Code == 503
	})
	if r.Capacity() != 10 {
		t.Errorf("capacity %v after an error reply, want the lease's 10 kept", r.Capacity())
	}

	// A lower term is ignored.
	f.set(func(f *fakeCoordinator) { f.errCode, f.term, f.capacity = 0, 4, 99 })
	poll.Until(t, 30*time.Second, "stale term reported", func() bool { return errors.Is(a.LastError(), ErrStaleTerm) })
	if r.Capacity() != 10 {
		t.Errorf("capacity %v after a stale reply, want 10", r.Capacity())
	}
	f.set(func(f *fakeCoordinator) { f.term = 6 })
	poll.Until(t, 30*time.Second, "newer term accepted", func() bool { return r.Capacity() == 99 && a.LastError() == nil })

	// SetWants: a large change is sent early; bad values are refused.
	if err := r.SetWants(math.NaN()); err == nil {
		t.Error("SetWants(NaN) = nil")
	}
	if err := r.SetWants(-1); err == nil {
		t.Error("SetWants(-1) = nil")
	}
	if err := r.SetWants(500); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "new wants sent", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.requests[len(f.requests)-1].GetResource()[0].GetWants() == 500
	})

	if _, err := a.Gauge("res"); err == nil {
		t.Error("Gauge on a rate resource id = nil error")
	}
	if _, err := a.Rate("bad id"); err == nil {
		t.Error("Rate with a space in the id = nil error")
	}
	if r2, err := a.Rate("res"); err != nil || r2 != r {
		t.Errorf("second Rate(res) = %p, %v; want the same limiter", r2, err)
	}

	done := make(chan error, 1)
	r.SetWants(0)
	f.set(func(f *fakeCoordinator) { f.capacity = 0 })
	poll.Until(t, 30*time.Second, "capacity 0", func() bool { return r.Capacity() == 0 })
	go func() { done <- r.Wait(context.Background()) }()
	if err := a.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after Close = %v, want ErrClosed", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.released) != 1 || len(f.released[0].GetResourceId()) != 1 || f.released[0].GetClientId() != "proto-client" {
		t.Errorf("released = %v, want one release of res by proto-client", f.released)
	}
	if _, err := a.Rate("other"); !errors.Is(err, ErrClosed) {
		t.Errorf("Rate after Close = %v, want ErrClosed", err)
	}
}

func TestOptions(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"empty client id", WithClientID("")},
		{"client id with space", WithClientID("a b")},
		{"node with dot", WithNode("a.b")},
		{"unknown mode", WithMode(Mode(9))},
		{"nil logger", WithLogger(nil)},
		{"nil clock", WithClock(nil)},
		{"short timeout", WithRequestTimeout(10 * time.Millisecond)},
		{"long timeout", WithRequestTimeout(time.Minute + time.Nanosecond)},
		{"zero gap", WithMinRefreshGap(0)},
		{"nil callback", WithOnChange(nil)},
	} {
		if _, err := New(nc, tc.opt); err == nil {
			t.Errorf("%s: New = nil error", tc.name)
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil) = nil error")
	}
	a := newAgent(t, nc)
	for _, tc := range []struct {
		name string
		opt  ResourceOption
	}{
		{"NaN wants", WithWants(math.NaN())},
		{"negative wants", WithWants(-1)},
		{"infinite wants", WithWants(math.Inf(1))},
		{"zero burst", WithBurst(0)},
		{"priority", WithPriority(5000)},
		{"initial capacity", WithInitialCapacity(-2)},
	} {
		if _, err := a.Rate("x", tc.opt); err == nil {
			t.Errorf("%s: Rate = nil error", tc.name)
		}
	}
	if a.ClientID() == "" || a.Mode() != Safe {
		t.Errorf("defaults: client id %q, mode %v", a.ClientID(), a.Mode())
	}
}

// TestInitialCapacity: before the first lease, Safe mode uses the initial
// capacity and Optimistic mode with automatic wants is unlimited.
func TestInitialCapacity(t *testing.T) {
	s := natstest.Server(t) // no coordinator: no responders
	nc := natstest.Conn(t, s)
	for _, tc := range []struct {
		mode Mode
		opts []ResourceOption
		want float64
	}{
		{Safe, nil, 0},
		{Safe, []ResourceOption{WithInitialCapacity(3)}, 3},
		{Safe, []ResourceOption{WithInitialCapacity(-1)}, math.Inf(1)},
		{Optimistic, nil, math.Inf(1)},
		{Optimistic, []ResourceOption{WithWants(8)}, 8},
		{Pessimistic, []ResourceOption{WithWants(8)}, 0},
	} {
		a := newAgent(t, nc, WithMode(tc.mode))
		r, err := a.Rate("r", tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if c := r.Capacity(); c != tc.want {
			t.Errorf("%v %d options: capacity %v, want %v", tc.mode, len(tc.opts), c, tc.want)
		}
		poll.Until(t, 30*time.Second, "no responders reported", func() bool {
			return errors.Is(a.LastError(), nats.ErrNoResponders)
		})
	}
}

// TestDemandAtZeroAsksAtOnce: with automatic wants an idle resource is
// granted 0; the first refused call makes the agent ask again with the
// demand it saw, without waiting for the next sample.
func TestDemandAtZeroAsksAtOnce(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	startCoordinator(t, natstest.Conn(t, s), testTemplate("idle", 100))
	a := newAgent(t, natstest.Conn(t, s))
	r, err := a.Rate("idle")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "a lease of 0 for no demand", func() bool {
		st := r.Status()
		return st.Source == SourceLease && st.Capacity == 0
	})
	if r.Allow() {
		t.Fatal("Allow at capacity 0 = true")
	}
	poll.Until(t, 30*time.Second, "capacity after demand at 0", func() bool { return r.Capacity() > 0 })
	if w := r.Status().Wants; !(w > 0) || math.IsInf(w, 0) {
		t.Errorf("wants = %v, want positive and finite", w)
	}
}

// A resource the coordinator refuses (no template, unmatched resources
// rejected) carries its own error; the agent's other resources keep
// refreshing in the same batched request.
func TestRefusedResourceDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	startCoordinator(t, natstest.Conn(t, s), testTemplate("db", 100)) // no fallback: unmatched rejected
	// A minute to answer: db's status must show no error, not a refresh
	// that timed out on a loaded machine.
	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"), WithRequestTimeout(time.Minute))
	db, err := a.Rate("db", WithWants(40))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "db leased", func() bool { return db.Capacity() == 40 })
	typo, err := a.Rate("dbb", WithWants(5))
	if err != nil {
		t.Fatal(err)
	}
	first := db.Expiry()
	poll.Until(t, 10*time.Second, "db keeps refreshing next to the refused resource", func() bool {
		return db.Expiry().After(first) && db.Capacity() == 40
	})
	var se *ServiceError
	if st := typo.Status(); !errors.As(st.LastError, &se) || se.Code != 404 || st.Leased {
		t.Fatalf("refused resource status = %+v", st)
	}
	if st := db.Status(); st.LastError != nil {
		t.Fatalf("served resource reports %v", st.LastError)
	}
}
