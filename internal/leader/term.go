// Package leader is the skeleton of allot's elected services: an elected
// leader serving one subject partition for one term. The lease
// coordinator, the quota service and the domain-limits service each
// supply their endpoints, their stats, their periodic tick and their
// close; this package owns the rest: the election (Seat), the micro
// service and its endpoints (Term), the intake every request passes
// through, the gate that keeps a deposed or lapsed leader silent, the
// drain on Stop, and the replica status.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// StopGrace bounds how long Stop waits while no delivered request gets
// handled. Stop normally ends as soon as the drained subscriptions have
// handed over their last request, however long that takes; the bound
// only ends a drain that has stalled: a connection broken so that the
// drain cannot complete, or a handler that never returns.
const StopGrace = 2 * time.Second

// flushTimeout bounds the flush after subscribing.
const flushTimeout = 5 * time.Second

// Endpoint is one subject a term serves. No queue group: every replica
// subscribed gets every request and only the one whose gate is open
// answers, so a stale subscriber (a frozen leader, a subscription left
// by a reconnect) never takes a request away from the leader.
type Endpoint struct {
	// Name names a micro endpoint in INFO and STATS.
	Name string
	// Subject is the subject subscribed to.
	Subject string
	// Handle serves a micro endpoint.
	Handle micro.HandlerFunc
	// Msg, instead of Handle, serves a plain subscription: for a handler
	// that needs the message itself (its wire size, say), which micro's
	// requests hide. It is not listed in the service's INFO.
	Msg nats.MsgHandler
}

// Spec is what a product supplies for one term.
type Spec struct {
	// Name, Version and Description describe the micro service.
	Name, Version, Description string
	// Node, ServerID and Term go into the service's metadata.
	Node, ServerID string
	Term           uint64
	// Partitions > 0 adds partition and partitions to the service's
	// metadata and partition to every endpoint's.
	Partition, Partitions int
	// Stats is the data of the service's STATS. Optional.
	Stats func() any
	// Endpoints are served from Start until Stop.
	Endpoints []Endpoint
	// Gate decides whether replies may be sent. Default: a new gate.
	Gate *Gate
	// TickEvery and Tick, if both set, run Tick every TickEvery until Stop
	// (a sweep of idle state).
	TickEvery time.Duration
	Tick      func()
	// Close, if set, runs in Stop once the delivered requests have been
	// handled and before the gate closes, so that it can still answer
	// what it queued.
	Close func()
	// Logger receives the term's logs. Default slog.Default().
	Logger *slog.Logger
}

// Term is one leadership term's serving: a micro service with its
// endpoints. Create it with Start; Stop it when the term ends.
type Term struct {
	nc   *nats.Conn
	spec Spec
	gate *Gate
	log  *slog.Logger

	svc  micro.Service
	subs []*nats.Subscription

	// delivered counts the requests handed to the intake, handled those
	// whose handler has returned.
	delivered atomic.Uint64
	handled   atomic.Uint64

	stop     chan struct{}
	ticker   sync.WaitGroup
	stopOnce sync.Once
}

// Start registers the micro service and the endpoints of spec and starts
// the tick. It returns once the subscriptions are live at the server, so
// that a request sent after it is answered.
func Start(ctx context.Context, nc *nats.Conn, spec Spec) (*Term, error) {
	if nc == nil {
		return nil, errors.New("leader: nil NATS connection")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("leader: start %s: %w", spec.Name, err)
	}
	if spec.TickEvery < 0 {
		return nil, fmt.Errorf("leader: tick interval %v is negative", spec.TickEvery)
	}
	if spec.Logger == nil {
		spec.Logger = slog.Default()
	}
	if spec.Gate == nil {
		spec.Gate = NewGate(nil, spec.Logger, spec.Name)
	}
	t := &Term{nc: nc, spec: spec, gate: spec.Gate, log: spec.Logger, stop: make(chan struct{})}
	meta := map[string]string{"node": spec.Node, "server_id": spec.ServerID, "term": strconv.FormatUint(spec.Term, 10)}
	epMeta := map[string]string{"node": spec.Node}
	if spec.Partitions > 0 {
		meta["partition"], meta["partitions"] = strconv.Itoa(spec.Partition), strconv.Itoa(spec.Partitions)
		epMeta["partition"] = meta["partition"]
	}
	cfg := micro.Config{Name: spec.Name, Version: spec.Version, Description: spec.Description, Metadata: meta}
	if spec.Stats != nil {
		cfg.StatsHandler = func(*micro.Endpoint) any { return spec.Stats() }
	}
	svc, err := micro.AddService(nc, cfg)
	if err != nil {
		return nil, fmt.Errorf("leader: register micro service %s: %w", spec.Name, err)
	}
	t.svc = svc
	for _, e := range spec.Endpoints {
		if e.Msg != nil {
			var sub *nats.Subscription
			if sub, err = nc.Subscribe(e.Subject, t.intakeMsg(e.Msg)); err == nil {
				t.subs = append(t.subs, sub)
			}
		} else {
			err = svc.AddEndpoint(e.Name, t.intake(e.Handle), micro.WithEndpointSubject(e.Subject),
				micro.WithEndpointQueueGroupDisabled(), micro.WithEndpointMetadata(epMeta))
		}
		if err != nil {
			t.unsubscribe()
			return nil, fmt.Errorf("leader: %s: serve %s: %w", spec.Name, e.Subject, err)
		}
	}
	if err := nc.FlushTimeout(flushTimeout); err != nil {
		t.log.Warn("flush after registering endpoints", "err", err)
	}
	if spec.TickEvery > 0 && spec.Tick != nil {
		t.ticker.Add(1)
		go t.tick()
	}
	return t, nil
}

// intake is the one function every request of a micro endpoint passes
// before its handler (see admit).
func (t *Term) intake(h micro.HandlerFunc) micro.HandlerFunc {
	return func(m micro.Request) {
		if t.admit() {
			h(m)
		}
		t.handled.Add(1)
	}
}

// intakeMsg is intake for a plain subscription.
func (t *Term) intakeMsg(h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		if t.admit() {
			h(m)
		}
		t.handled.Add(1)
	}
}

// admit counts a request taken up, and refuses one that arrives after
// Stop, leaving it to the next leader.
func (t *Term) admit() bool {
	t.delivered.Add(1)
	if t.gate.Closed() {
		t.gate.Silenced.Add(1)
		return false
	}
	return true
}

// tick runs spec.Tick every spec.TickEvery until Stop.
func (t *Term) tick() {
	defer t.ticker.Done()
	tk := time.NewTicker(t.spec.TickEvery)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
			t.spec.Tick()
		}
	}
}

// Stop unsubscribes, waits until every request already delivered has
// been handled (see drain), runs the product's Close, shuts the gate and
// ends the tick. After it the term is silent. Stop is idempotent.
func (t *Term) Stop() {
	t.stopOnce.Do(func() {
		t.drain(StopGrace)
		if t.spec.Close != nil {
			t.spec.Close()
		}
		t.gate.Close()
		close(t.stop)
		t.ticker.Wait()
		t.log.Info(t.spec.Name+" stopped", "term", t.spec.Term, "requests", t.handled.Load(), "silenced", t.gate.Silenced.Load())
	})
}

// drain stops the subscriptions and returns once the requests they had
// delivered have all been handled; early if the term may no longer
// answer (a lapsed or deposed leader has nothing to wait for: its
// successor answers the retries), or once none was handled for grace.
//
// micro drains its endpoints' subscriptions on Stop but keeps them to
// itself, and reports Stopped as soon as the drain has begun; nats.go
// marks a drained subscription closed only after polling (every 100ms,
// and after a flush that waits out a reconnect). So: once the server has
// the unsubscriptions (a flush), nothing more arrives and every message it
// had sent is on its subscription's queue; a barrier then runs once every
// queue of the connection, micro's and ours, has been worked down to it,
// that is once the last handler of a delivered request has returned.
func (t *Term) drain(grace time.Duration) {
	t.unsubscribe()
	if t.nc.IsConnected() && t.gate.Open() {
		if err := t.nc.FlushTimeout(grace); err != nil {
			t.log.Warn("flush after unsubscribing", "err", err)
		}
	}
	barrier := make(chan struct{})
	if err := t.nc.Barrier(func() { close(barrier) }); err != nil {
		close(barrier) // closed: the connection delivers nothing more
	}
	tk := time.NewTicker(drainPoll)
	defer tk.Stop()
	last, since := t.handled.Load(), time.Now()
	for {
		select {
		case <-barrier:
			return
		case <-tk.C:
		}
		switch h := t.handled.Load(); {
		case !t.gate.Open():
			return
		case h != last:
			last, since = h, time.Now()
		case time.Since(since) >= grace:
			d, _ := t.Counts()
			t.log.Warn("the drain stalled: no request handled for the stop grace", "grace", grace, "delivered", d, "handled", h)
			return
		}
	}
}

// drainPoll is how often a drain checks the gate and its progress.
const drainPoll = 25 * time.Millisecond

// unsubscribe drains the micro service's endpoints and the plain
// subscriptions.
func (t *Term) unsubscribe() {
	if err := t.svc.Stop(); err != nil {
		t.log.Warn("stopping micro service", "err", err)
	}
	for _, sub := range t.subs {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			t.log.Warn("draining subscription", "subject", sub.Subject, "err", err)
		}
	}
}

// Counts returns how many requests the intake took up, and how many of
// them have been handled (their handler returned).
func (t *Term) Counts() (delivered, handled uint64) {
	return t.delivered.Load(), t.handled.Load()
}

// Gate returns the term's gate.
func (t *Term) Gate() *Gate { return t.gate }

// Done is closed when the term stops serving on its own: its gate failed
// (the leadership lapsed, a newer leader deposed it). Call Stop after it.
func (t *Term) Done() <-chan struct{} { return t.gate.Done() }

// Err says why the term stopped serving on its own, or nil.
func (t *Term) Err() error { return t.gate.Err() }
