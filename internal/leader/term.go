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
	"golang.org/x/time/rate"

	"github.com/allot/allot/internal/wire"
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
//
// Every request passes the term's intake first (intake.go): one over
// the size limit gets 413, one over its tenant's rate 429, and one past
// the in-flight bound 503, at once; the others wait on the endpoint's
// lane, known clients' first, for Handle, which runs on a goroutine of
// the endpoint's own (or, Inline, go to Handle at once). One whose
// sender's time-out passes while it waits is dropped unanswered.
type Endpoint struct {
	// Name names a micro endpoint in INFO and STATS.
	Name string
	// Subject is the subject subscribed to.
	Subject string
	// Handle serves the endpoint's requests, each a *Request.
	Handle micro.HandlerFunc
	// Plain serves a plain subscription instead of a micro endpoint: for
	// a handler that needs the message itself (Request.Msg: its wire
	// size, say), which micro's requests hide. It is not listed in the
	// service's INFO.
	Plain bool
	// CheckSize, if set, refuses with 413 and its error a request whose
	// payload of n bytes in encoding e (its Content-Type) is too large,
	// before anything decodes it.
	CheckSize func(e wire.Encoding, n int) error
	// Tenant, if set, names the tenant a request's subject speaks for
	// ("" none): its requests count against Limits.TenantRate.
	Tenant func(subject string) string
	// Deferred says Handle answers later than it returns (a round loop),
	// or releases the request itself so that it is reused (Release): a
	// request then stays in flight until Finish(m) or Release(m).
	Deferred bool
	// Beside serves the endpoint on Spec.Beside, a connection of its own
	// (Plain endpoints only): its requests and answers queue behind none
	// of the other endpoints' at the server or in the client.
	Beside bool
	// Ignore, if set, names the subjects of Subject this endpoint leaves
	// alone because another endpoint's subscription serves them (a
	// wildcard's sibling with a lane of its own).
	Ignore func(subject string) bool
	// Inline runs Handle on the subscription's goroutine as soon as the
	// intake has admitted a request, instead of handing it to a lane:
	// for a handler that only decodes and queues (Deferred), whose cost
	// is below the hand-off's. Nothing then waits in front of it, so the
	// lane's ordering by class has nothing to order: a product that
	// queues must order its queue itself.
	Inline bool
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
	// Limits bound the intake.
	Limits Limits
	// Classify, if set, sorts a request by its subject and the client
	// its HeaderClient names ("" if none) before it is decoded; default
	// ClassNewcomer.
	Classify func(subject, client string) Class
	// ErrorBody, if set, is the body of the intake's refusals (a 413,
	// 429 or 503 in the product's error format); default none.
	ErrorBody func(h nats.Header, code int, text string, retryAfter time.Duration) []byte
	// Beside is the connection of the endpoints marked Beside: a second
	// one to the same servers (see Beside). Nil: they use the term's.
	Beside *nats.Conn
	// Now is the intake's clock: requests' deadlines. Default time.Now.
	Now func() time.Time
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

	svc   micro.Service
	subs  []*nats.Subscription
	in    *intake
	lanes []*lane
	// reqs recycles the requests a product gave back (Release).
	reqs sync.Pool
	quit chan struct{} // ends the lanes

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
	if spec.Now == nil {
		spec.Now = time.Now
	}
	filled, err := spec.Limits.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("leader: %w", err)
	}
	spec.Limits = filled
	t := &Term{nc: nc, spec: spec, gate: spec.Gate, log: spec.Logger, stop: make(chan struct{}), quit: make(chan struct{}),
		in: &intake{lim: spec.Limits, tenants: map[string]*rate.Limiter{}, refusals: map[bodyKey]refusal{}}}
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
	lim := spec.Limits
	for _, e := range spec.Endpoints {
		l := &lane{t: t, ep: e, nc: nc, wake: make(chan struct{}, 1)}
		if e.Beside && spec.Beside != nil {
			l.nc = spec.Beside
		}
		switch {
		case e.Beside && !e.Plain:
			err = errors.New("an endpoint beside must be plain")
		case e.Plain:
			var sub *nats.Subscription
			if sub, err = l.nc.Subscribe(e.Subject, t.intakeMsg(l)); err == nil {
				t.subs = append(t.subs, sub)
				err = sub.SetPendingLimits(lim.PendingMsgs, lim.PendingBytes)
			}
		default:
			err = svc.AddEndpoint(e.Name, t.intake(l), micro.WithEndpointSubject(e.Subject),
				micro.WithEndpointQueueGroupDisabled(), micro.WithEndpointMetadata(epMeta),
				micro.WithEndpointPendingLimits(lim.PendingMsgs, lim.PendingBytes))
		}
		if err != nil {
			close(t.quit)
			t.unsubscribe()
			return nil, fmt.Errorf("leader: %s: serve %s: %w", spec.Name, e.Subject, err)
		}
		t.lanes = append(t.lanes, l)
		if !e.Inline {
			go l.run(t.quit)
		}
	}
	for _, c := range t.conns() {
		if err := c.FlushTimeout(flushTimeout); err != nil {
			t.log.Warn("flush after registering endpoints", "err", err)
		}
	}
	if spec.TickEvery > 0 && spec.Tick != nil {
		t.ticker.Add(1)
		go t.tick()
	}
	return t, nil
}

// intake is the one function every request of a micro endpoint passes
// on its subscription's goroutine (see take).
func (t *Term) intake(l *lane) micro.HandlerFunc {
	return func(m micro.Request) {
		t.take(l, m.Subject(), m.Reply(), nats.Header(m.Headers()), m.Data(), nil)
	}
}

// intakeMsg is intake for a plain subscription.
func (t *Term) intakeMsg(l *lane) nats.MsgHandler {
	return func(m *nats.Msg) { t.take(l, m.Subject, m.Reply, m.Header, m.Data, m) }
}

// take admits a request to l or refuses it at once: no decoding, no
// waiting, so that the intake keeps up with any flood and nothing queues
// in front of it. It counts the request taken up, leaves one that
// arrives after Stop to the next leader, refuses one over the size limit
// (413), over its tenant's rate (429) or past the in-flight bound (503),
// and queues the rest with their deadline.
func (t *Term) take(l *lane, subject, reply string, h nats.Header, data []byte, msg *nats.Msg) {
	if l.ep.Ignore != nil && l.ep.Ignore(subject) {
		return
	}
	t.delivered.Add(1)
	if t.gate.Closed() {
		t.gate.Silenced.Add(1)
		t.handled.Add(1)
		return
	}
	now := t.spec.Now()
	hd := readHeaders(h)
	code, text, retry := 0, "", time.Duration(0)
	class := ClassNewcomer
	if t.spec.Classify != nil {
		class = t.spec.Classify(subject, hd.client)
	}
	if l.ep.CheckSize != nil {
		if err := l.ep.CheckSize(wire.EncodingOfType(hd.contentType), len(data)); err != nil {
			t.in.tooLarge.Add(1)
			code, text = CodeTooLarge, err.Error()
		}
	}
	tenant := ""
	if l.ep.Tenant != nil {
		tenant = l.ep.Tenant(subject)
	}
	if code == 0 && tenant != "" {
		if d := t.in.tenantDelay(tenant, now); d > 0 {
			t.in.limited.Add(1)
			code, retry = CodeTooMany, (d + 9*time.Millisecond).Truncate(10*time.Millisecond)
			text = fmt.Sprintf("tenant over its request rate (%g/s): retry after %v", t.in.lim.TenantRate, retry)
		}
	}
	held := "" // the tenant whose newcomer's place r holds
	if code == 0 && !t.in.acquire(class) {
		code = CodeUnavailable
	} else if code == 0 && tenant != "" && class == ClassNewcomer {
		if t.in.acquireTenant(tenant) {
			held = tenant
		} else {
			t.in.inFlight.Add(-1)
			code = CodeUnavailable
		}
	}
	if code == CodeUnavailable {
		t.in.refused.Add(1)
		retry = t.in.retryAfter()
		text = "overloaded: retry after " + retry.Round(time.Millisecond).String()
	}
	if code != 0 {
		if t.gate.Open() {
			t.refuse(l, reply, hd.contentType, code, text, retry)
		} else {
			t.gate.Silenced.Add(1)
		}
		t.handled.Add(1)
		return
	}
	r, _ := t.reqs.Get().(*Request)
	if r == nil {
		r = &Request{t: t}
	}
	r.nc, r.subject, r.reply, r.header, r.data, r.msg, r.class, r.tenant = l.nc, subject, reply, h, data, msg, class, held
	r.contentType, r.client = hd.contentType, hd.client
	r.deadline = now.Add(timeoutOf(hd.timeout, t.in.lim.MaxAge))
	if !l.ep.Inline {
		l.push(r)
		return
	}
	// Handled here: a Deferred handler may have answered and released r
	// by the time it returns, so r is not touched after.
	l.ep.Handle(r)
	if !l.ep.Deferred {
		r.Finish()
	}
	t.handled.Add(1)
}

// refuse answers a request to reply with an error: the micro error
// headers, Allot-Retry-After and the product's body. A refusal other
// than a 413 says nothing of the request but its Content-Type, so its
// headers and body are made once (see intake.refusal) and only the
// publish is left per request: under a flood the intake refuses most
// requests, and must keep up. micro's STATS do not count these errors;
// the intake's do.
func (t *Term) refuse(l *lane, reply, ct string, code int, text string, retry time.Duration) {
	if reply == "" {
		return
	}
	mk := func() refusal {
		hdr := nats.Header{micro.ErrorHeader: {text}, micro.ErrorCodeHeader: {strconv.Itoa(code)}}
		if retry > 0 {
			hdr[HeaderRetryAfter] = []string{strconv.FormatInt(retry.Milliseconds(), 10)}
		}
		var body []byte
		if t.spec.ErrorBody != nil {
			body = t.spec.ErrorBody(nats.Header{"Content-Type": {ct}}, code, text, retry)
		}
		return refusal{hdr, body}
	}
	var r refusal
	if code == CodeTooLarge {
		r = mk()
	} else {
		r = t.in.refusal(bodyKey{ct, code, retry}, mk)
	}
	_ = l.nc.PublishMsg(&nats.Msg{Subject: reply, Header: r.header, Data: r.body})
}

// Intake returns what the intake counted.
func (t *Term) Intake() IntakeStats { return t.in.stats() }

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
		close(t.quit)
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
// that is once the intake has taken up every delivered request; the
// lanes have handed them all over once as many were handled as taken up.
func (t *Term) drain(grace time.Duration) {
	t.unsubscribe()
	conns := t.conns()
	var pending sync.WaitGroup
	for _, c := range conns {
		if c.IsConnected() && t.gate.Open() {
			if err := c.FlushTimeout(grace); err != nil {
				t.log.Warn("flush after unsubscribing", "err", err)
			}
		}
		pending.Add(1)
		if err := c.Barrier(pending.Done); err != nil {
			pending.Done() // closed: the connection delivers nothing more
		}
	}
	barrier := make(chan struct{})
	go func() { pending.Wait(); close(barrier) }()
	tk := time.NewTicker(drainPoll)
	defer tk.Stop()
	last, since := t.handled.Load(), time.Now()
	reached := false // the barrier: every delivered request is taken up
	for {
		select {
		case <-barrier:
			barrier, reached = nil, true
		case <-tk.C:
		}
		switch h := t.handled.Load(); {
		case reached && h == t.delivered.Load():
			return // the lanes have handed over every request
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

// conns are the connections the term's endpoints are served on.
func (t *Term) conns() []*nats.Conn {
	if b := t.spec.Beside; b != nil && b != t.nc {
		for _, e := range t.spec.Endpoints {
			if e.Beside {
				return []*nats.Conn{t.nc, b}
			}
		}
	}
	return []*nats.Conn{t.nc}
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
