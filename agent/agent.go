package agent

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/agent/internal/option"
	"github.com/allot/allot/agent/internal/rpc"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
)

// Kind is the kind of a resource.
type Kind int

const (
	// KindRate is a rate resource: capacity is events per second.
	KindRate Kind = iota + 1
	// KindGauge is a gauge resource: capacity is units in flight.
	KindGauge
)

// String returns "rate" or "gauge".
func (k Kind) String() string {
	switch k {
	case KindRate:
		return "rate"
	case KindGauge:
		return "gauge"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Source says where the capacity in force comes from.
type Source int

const (
	// SourceLease is a valid lease from the coordinator.
	SourceLease Source = iota + 1
	// SourceSafe is the safe capacity (or the initial capacity before the
	// coordinator reported one), used in Safe mode without a valid lease.
	SourceSafe
	// SourceOptimistic is the wants, used in Optimistic mode without a
	// valid lease.
	SourceOptimistic
	// SourcePessimistic is zero, used in Pessimistic mode without a valid
	// lease.
	SourcePessimistic
	// SourceNone is nothing, in Safe mode once the lease and then the
	// safe capacity have both ended unrefreshed: a client cut off from
	// every coordinator for longer than its floor lease uses nothing,
	// since nobody counts it any more.
	SourceNone
)

// String returns "lease", "safe", "optimistic", "pessimistic" or "none".
func (s Source) String() string {
	switch s {
	case SourceLease:
		return "lease"
	case SourceSafe:
		return "safe"
	case SourceOptimistic:
		return "optimistic"
	case SourcePessimistic:
		return "pessimistic"
	case SourceNone:
		return "none"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Status describes one resource as the agent sees it.
type Status struct {
	// ResourceID identifies the resource.
	ResourceID string
	// Kind is KindRate or KindGauge.
	Kind Kind
	// Capacity is the capacity in force: per second for rates, units in
	// flight for gauges; +Inf when unlimited.
	Capacity float64
	// Source says where Capacity comes from.
	Source Source
	// Mode is the agent's failure mode.
	Mode Mode
	// Leased reports whether a lease is held; Granted, Expiry and
	// RefreshInterval describe it.
	Leased          bool
	Granted         float64
	Expiry          time.Time
	RefreshInterval time.Duration
	// SafeCapacity is the last safe capacity the coordinator reported (-1
	// unlimited): what Safe mode uses once the lease ends unrefreshed,
	// until SafeUntil (zero: no end, from a coordinator before floors).
	// SafeKnown is false until it reported one.
	SafeCapacity float64
	SafeUntil    time.Time
	SafeKnown    bool
	// Wants is the capacity asked for; AutoWants reports whether it is
	// estimated from demand.
	Wants     float64
	AutoWants bool
	// LastRefresh is the time of the last successful GetCapacity.
	LastRefresh time.Time
	// LastError is the error of the last failed GetCapacity since the last
	// successful one, or the error the coordinator gave for this resource
	// alone in the last reply (a *ServiceError, e.g. 404 when it matches
	// no template), or nil.
	LastError error
	// Shadow reports that the coordinator's last answer put the resource
	// in shadow mode: Capacity is then the wants (+Inf with automatic
	// wants) and ShadowCapacity the capacity that would be in force, the
	// grant or the failure mode's (Source says which).
	Shadow         bool
	ShadowCapacity float64
	// ShadowAdmitted counts the events (tokens for rates, units for
	// gauges) admitted in shadow mode since the resource was created, and
	// WouldRefuse those of them that ShadowCapacity would have refused or,
	// for a rate's Wait and Reserve, made wait. Both only grow.
	ShadowAdmitted uint64
	WouldRefuse    uint64
}

// An Agent holds this client's leases for any number of resources and
// keeps them refreshed from the coordinator over NATS. Create one per
// process with New, get limiters from Rate and Gauge, and Close it when
// done. All methods are safe for concurrent use.
type Agent struct {
	nc      *nats.Conn
	o       options
	log     *slog.Logger
	rpc     *rpc.Caller
	getSubj string
	// refreshSubj is where a holder's GetCapacity goes: served before
	// newcomers' when the coordinator is overloaded.
	refreshSubj string
	relSubj     string

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	mu  sync.Mutex
	res map[string]*resource
	// nparts is the node's lease partitions as its coordinators last
	// said (partitions.go), terms what is known of each.
	nparts    int
	terms     []partState
	lastErr   error
	lastOK    time.Time
	failures  int
	earlyAt   time.Time         // pending early refresh, zero if none
	interval  time.Duration     // shortest refresh interval of the last response
	notes     []Status          // changes the loop has yet to report to OnChange
	releases  []*pendingRelease // resources closed on their own, to release
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// pendingRelease is a resource closed on its own, waiting for the loop to
// send its ReleaseCapacity; done receives the outcome.
type pendingRelease struct {
	id   string
	done chan error
}

// resource is the agent's state for one resource. Fields after the first
// group are guarded by Agent.mu.
type resource struct {
	id       string
	kind     Kind
	priority int32
	rate     *RateLimiter
	gauge    *Gauge
	a        *Agent

	wants      float64 // explicit wants, when !auto
	auto       bool
	est        estimator
	sampledAt  time.Time
	pending    float64 // rate demand not yet turned into a sample
	throttled  bool
	starving   bool // demand seen at capacity 0: sample without waiting
	sentWants  float64
	initialCap float64

	leased  bool
	granted float64
	expiry  time.Time
	refresh time.Duration
	// safe is the safe capacity last reported (the floor), until
	// safeUntil (zero: no end).
	safe      float64
	safeUntil time.Time
	safeKnown bool

	inForce         float64
	source          Source
	shadow          bool    // the last reply said shadow mode
	shadowCap       float64 // capacity that would be in force, when shadowed
	shadowInstalled bool    // shadow as installed in the limiter
	err             error   // this resource's own error in the last reply, if any
	sent            bool    // named in a GetCapacity request: has to be released
	closed          bool    // closed, alone or with the agent: no longer refreshed
	use             usage   // admitted, refused, time without a lease (usage.go)
}

// New starts an agent on nc. It does not contact the coordinator until the
// first resource is created. Options are checked and the first invalid one
// is reported; a closed connection is refused (errors.Is
// nats.ErrConnectionClosed).
func New(nc *nats.Conn, opts ...Option) (*Agent, error) {
	if nc == nil {
		return nil, errors.New("agent: nil NATS connection")
	}
	if nc.IsClosed() {
		// It never reconnects: an agent on it would only time out.
		return nil, fmt.Errorf("agent: %w", nats.ErrConnectionClosed)
	}
	o := options{
		node:           defaultNode,
		requestTimeout: defaultRequestTimeout,
		minRefreshGap:  defaultMinRefreshGap,
	}
	if err := option.Apply(&o, opts); err != nil {
		return nil, err
	}
	if o.clientID == "" {
		o.clientID = defaultClientID()
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	a := &Agent{
		nc:          nc,
		rpc:         rpc.New(nc, serviceError),
		o:           o,
		log:         o.logger.With("component", "allot-agent", "client_id", o.clientID),
		getSubj:     subjects.Coordinator(o.node, subjects.CapacityGet),
		relSubj:     subjects.Coordinator(o.node, subjects.CapacityRelease),
		refreshSubj: subjects.Coordinator(o.node, subjects.CapacityRefresh),
		kick:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		res:         make(map[string]*resource),
		nparts:      1,
		terms:       make([]partState, 1),
	}
	go a.run()
	return a, nil
}

func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	id := host + ":" + strconv.Itoa(os.Getpid()) + ":" + strconv.FormatUint(rand.Uint64()&0xffffffff, 16)
	if wire.ValidateID("client id", id) != nil {
		id = "agent:" + strconv.Itoa(os.Getpid()) + ":" + strconv.FormatUint(rand.Uint64(), 16)
	}
	return id
}

// ClientID returns the identifier this agent sends to the coordinator
// (and its quota and domain clients to their services).
func (a *Agent) ClientID() string { return a.o.clientID }

// Conn returns the NATS connection the agent uses, and its quota and
// domain clients with it.
func (a *Agent) Conn() *nats.Conn { return a.nc }

// Node returns the coordinator node the agent talks to (WithNode): its
// subjects, and those of its quota and domain clients, start with
// allot.<node>.
func (a *Agent) Node() string { return a.o.node }

// Logger returns the logger set with WithLogger, or slog.Default(); the
// agent's quota and domain clients log to it too.
func (a *Agent) Logger() *slog.Logger { return a.o.logger }

// Mode returns the agent's failure mode.
func (a *Agent) Mode() Mode { return a.o.mode }

// Rate returns the rate limiter for resource id, creating the resource on
// first use. Calling Rate again with the same id returns the same limiter
// and ignores the options (once that limiter is closed, it creates a new
// one); it is an error if id is a gauge resource.
func (a *Agent) Rate(id string, opts ...ResourceOption) (*RateLimiter, error) {
	r, err := a.resource(id, KindRate, opts)
	if err != nil {
		return nil, err
	}
	return r.rate, nil
}

// Gauge returns the gauge for resource id, creating the resource on first
// use. Calling Gauge again with the same id returns the same gauge and
// ignores the options (once that gauge is closed, it creates a new one);
// it is an error if id is a rate resource.
func (a *Agent) Gauge(id string, opts ...ResourceOption) (*Gauge, error) {
	r, err := a.resource(id, KindGauge, opts)
	if err != nil {
		return nil, err
	}
	return r.gauge, nil
}

func (a *Agent) resource(id string, kind Kind, opts []ResourceOption) (*resource, error) {
	if err := wire.ValidateID("resource id", id); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	ro := resourceOptions{autoWants: true}
	if err := option.Apply(&ro, opts); err != nil {
		return nil, fmt.Errorf("resource %q: %w", id, err)
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ErrClosed
	}
	if r, ok := a.res[id]; ok {
		a.mu.Unlock()
		if r.kind != kind {
			return nil, fmt.Errorf("agent: resource %q is a %s resource, not a %s resource", id, r.kind, kind)
		}
		return r, nil
	}
	t := clock.Now(a.o.clock)
	r := &resource{
		id: id, kind: kind, priority: ro.priority, a: a,
		wants: ro.wants, auto: ro.autoWants, initialCap: ro.initialCap,
		sampledAt: t,
	}
	if kind == KindRate {
		r.rate = newRateLimiter(a.o.clock, ro.burst)
		r.rate.res = r
	} else {
		r.gauge = newGauge()
		r.gauge.res = r
	}
	a.res[id] = r
	if st, changed := a.applyLocked(r, t); changed {
		a.noteLocked(st) // reported by the loop, like every other change
	}
	// Ask at once when the wants are known; with automatic wants first
	// measure demand for a short window so the first request means
	// something.
	at := t
	if r.auto {
		at = t.Add(minSampleWindow)
	}
	a.scheduleEarlyLocked(at)
	a.mu.Unlock()
	a.poke()
	return r, nil
}

// noteLocked queues a change for the loop to report to OnChange.
func (a *Agent) noteLocked(st Status) {
	if a.o.onChange != nil {
		a.notes = append(a.notes, st)
	}
}

func (a *Agent) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// scheduleEarlyLocked asks for a refresh no earlier than at; the loop
// enforces the minimum gap between requests.
func (a *Agent) scheduleEarlyLocked(at time.Time) {
	if a.earlyAt.IsZero() || at.Before(a.earlyAt) {
		a.earlyAt = at
	}
}

// SetWants fixes the capacity this client asks for, per second. A large
// change triggers an early refresh. NaN, infinite, negative or huge values
// are rejected.
func (l *RateLimiter) SetWants(w float64) error { return l.res.setWants(w) }

// AutoWants returns to estimating the wants from demand.
func (l *RateLimiter) AutoWants() { l.res.setAuto() }

// Status returns the resource's status.
func (l *RateLimiter) Status() Status { return l.res.status() }

// Capacity returns the capacity in force, per second (+Inf if unlimited).
func (l *RateLimiter) Capacity() float64 { return l.res.status().Capacity }

// Expiry returns when the current lease expires; zero if none is held.
func (l *RateLimiter) Expiry() time.Time { return l.res.status().Expiry }

// Close gives this resource's lease back and stops refreshing it, leaving
// the agent's other resources as they are: for limiters that come and go,
// such as one per tenant.
//
// It closes the limiter at once (waiters return ErrClosed, Allow reports
// false, Capacity 0), then sends ReleaseCapacity for this resource alone and returns
// its error. The release is sent by the agent's loop after any
// GetCapacity in flight has been answered (or timed out), so it cannot
// reach the coordinator ahead of a request that would grant the lease
// again; Close may therefore wait up to two request timeouts. A later
// Agent.Rate or Agent.Gauge with the same id creates a new limiter, whose
// first request follows the release. Close is idempotent and returns nil
// if the agent is closed. It must not be called from an OnChange function.
func (l *RateLimiter) Close() error { return l.res.close() }

// SetWants fixes the number of units in flight this client asks for. A
// large change triggers an early refresh. NaN, infinite, negative or huge
// values are rejected.
func (g *Gauge) SetWants(w float64) error { return g.res.setWants(w) }

// AutoWants returns to estimating the wants from the peak of units held
// and waited for.
func (g *Gauge) AutoWants() { g.res.setAuto() }

// Status returns the resource's status.
func (g *Gauge) Status() Status { return g.res.status() }

// Capacity returns the capacity in force, in units (+Inf if unlimited).
func (g *Gauge) Capacity() float64 { return g.res.status().Capacity }

// Expiry returns when the current lease expires; zero if none is held.
func (g *Gauge) Expiry() time.Time { return g.res.status().Expiry }

// Close gives this resource's lease back and stops refreshing it, leaving
// the agent's other resources as they are; waiters return ErrClosed and
// new acquires are refused. It works as RateLimiter.Close does.
func (g *Gauge) Close() error { return g.res.close() }

// close is RateLimiter.Close and Gauge.Close.
func (r *resource) close() error {
	if r == nil {
		return errors.New("agent: limiter not created by an Agent")
	}
	a := r.a
	a.mu.Lock()
	if r.closed {
		a.mu.Unlock()
		return nil
	}
	r.shutLocked()
	delete(a.res, r.id)
	if !r.sent { // the coordinator never heard of it
		a.mu.Unlock()
		return nil
	}
	rel := &pendingRelease{id: r.id, done: make(chan error, 1)}
	a.releases = append(a.releases, rel)
	a.mu.Unlock()
	a.poke()
	return <-rel.done
}

// shutLocked closes r's limiter and marks r closed. Its status says
// capacity 0, as the limiter now enforces.
func (r *resource) shutLocked() {
	r.closed, r.leased, r.inForce = true, false, 0
	if r.rate != nil {
		r.rate.shut()
	} else {
		r.gauge.shut()
	}
}

func (r *resource) setWants(w float64) error {
	if r == nil {
		return errors.New("agent: limiter not created by an Agent")
	}
	if err := checkWants(w); err != nil {
		return fmt.Errorf("resource %q: %w", r.id, err)
	}
	a := r.a
	a.mu.Lock()
	if r.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	old := r.currentWantsLocked()
	r.wants, r.auto = w, false
	if bigChange(old, w) {
		a.scheduleEarlyLocked(clock.Now(a.o.clock))
	}
	a.mu.Unlock()
	a.poke()
	return nil
}

// starved is called (without locks held) when a limiter refuses or holds
// back its first call since the capacity last changed: with automatic
// wants the coordinator may have granted 0, or less than the demand now,
// because no such demand was known, so ask again soon (within the minimum
// refresh gap) rather than at the next sample.
func (r *resource) starved() {
	a := r.a
	a.mu.Lock()
	if !r.auto || r.closed {
		a.mu.Unlock()
		return
	}
	r.starving = true
	a.scheduleEarlyLocked(clock.Now(a.o.clock))
	a.mu.Unlock()
	a.poke()
}

// answerAsks tells every rate limiter that a refresh was answered (or
// failed) and its capacity installed: callers waiting on an ask a refused
// call made try again.
func (a *Agent) answerAsks() {
	a.mu.Lock()
	lims := make([]*RateLimiter, 0, len(a.res))
	for _, r := range a.res {
		if r.rate != nil {
			lims = append(lims, r.rate)
		}
	}
	a.mu.Unlock()
	for _, l := range lims {
		l.askAnswered()
	}
}

func (r *resource) setAuto() {
	if r == nil {
		return
	}
	r.a.mu.Lock()
	r.auto = true
	r.a.mu.Unlock()
}

func (r *resource) status() Status {
	if r == nil {
		return Status{}
	}
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	return r.statusLocked()
}

func (r *resource) statusLocked() Status {
	a := r.a
	st := Status{
		ResourceID: r.id, Kind: r.kind, Capacity: r.inForce, Source: r.source, Mode: a.o.mode,
		Leased: r.leased, SafeCapacity: r.safe, SafeUntil: r.safeUntil, SafeKnown: r.safeKnown,
		Wants: r.currentWantsLocked(), AutoWants: r.auto,
		LastRefresh: a.lastOK, LastError: a.lastErr,
	}
	if r.err != nil {
		st.LastError = r.err
	}
	if r.leased {
		st.Granted, st.Expiry, st.RefreshInterval = r.granted, r.expiry, r.refresh
	}
	if r.shadowInstalled {
		st.Shadow, st.ShadowCapacity = true, r.shadowCap
	}
	st.ShadowAdmitted, st.WouldRefuse = r.shadowCountsLocked()
	return st
}

// currentWantsLocked is the wants to send: explicit, or the estimate.
func (r *resource) currentWantsLocked() float64 {
	if !r.auto {
		return r.wants
	}
	return r.est.value
}

// bigChange reports whether wants moved enough to refresh early: by more
// than a quarter and by at least one unit, or from or to zero.
func bigChange(old, w float64) bool {
	d := math.Abs(w - old)
	if old == 0 || w == 0 {
		return d > 0
	}
	return d >= 1 && d > 0.25*old
}

// Status returns the status of every resource, ordered by id.
func (a *Agent) Status() []Status {
	a.mu.Lock()
	out := make([]Status, 0, len(a.res))
	for _, r := range a.res {
		out = append(out, r.statusLocked())
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y Status) int { return cmp.Compare(x.ResourceID, y.ResourceID) })
	return out
}

// LastError returns the error of the last failed refresh since the last
// successful one, or nil.
func (a *Agent) LastError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr
}

// Term returns the highest coordinator term seen (of any lease
// partition, when the node has several).
func (a *Agent) Term() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var t uint64
	for _, st := range a.terms {
		t = max(t, st.term)
	}
	return t
}

// applyLocked computes the capacity in force for r at time t, drops an
// expired lease, and installs the capacity in the limiter. It reports the
// status when the capacity or its source changed.
func (a *Agent) applyLocked(r *resource, t time.Time) (Status, bool) {
	if r.closed {
		return Status{}, false
	}
	if r.leased && !t.Before(r.expiry) {
		r.leased = false
	}
	var c float64
	var src Source
	switch {
	case r.leased:
		c, src = r.granted, SourceLease
	case a.o.mode == Optimistic:
		src = SourceOptimistic
		if r.auto && !r.est.seen {
			c = math.Inf(1) // nothing known yet: optimism means no limit
		} else {
			c = r.currentWantsLocked()
		}
	case a.o.mode == Pessimistic:
		c, src = 0, SourcePessimistic
	case r.safeKnown && !r.safeUntil.IsZero() && !t.Before(r.safeUntil):
		// The floor ended too: the coordinator no longer counts it.
		c, src = 0, SourceNone
	default:
		src = SourceSafe
		c = r.initialCap
		if r.safeKnown {
			c = r.safe
		}
	}
	if c < 0 {
		c = math.Inf(1) // -1 means unlimited
	}
	shadowCap := c
	if r.shadow {
		c = r.shadowEnforcedLocked()
	}
	if c == r.inForce && src == r.source && r.shadow == r.shadowInstalled && (!r.shadow || shadowCap == r.shadowCap) {
		return Status{}, false
	}
	r.sourceLocked(src, t)
	r.inForce, r.source = c, src
	if r.shadow || r.shadowInstalled {
		r.shadowCap, r.shadowInstalled = shadowCap, r.shadow
		r.installShadowLocked(shadowCap)
	}
	if r.rate != nil {
		lim := rate.Limit(c)
		if math.IsInf(c, 1) {
			lim = rate.Inf
		}
		r.rate.setLimit(lim)
	} else {
		r.gauge.setLimit(capacityToLimit(c))
	}
	return r.statusLocked(), true
}

// sampleLocked folds the demand observed since the last sample into the
// wants estimate.
func (a *Agent) sampleLocked(r *resource, t time.Time) {
	dt := t.Sub(r.sampledAt)
	var x float64
	if r.rate != nil {
		d, th := r.rate.sampleDemand()
		r.pending += float64(d)
		r.throttled = r.throttled || th
		if dt < minSampleWindow && !(r.starving && r.pending > 0) {
			return
		}
		r.starving = false
		x = r.pending / max(dt, minSampleWindow).Seconds()
		if r.throttled {
			// Demand was held back: ask for more than we have, so closed
			// loops (which cannot show more demand than they are given)
			// still discover their share.
			x = max(x, 1.25*finiteOr(r.inForce, 0))
		}
		r.pending, r.throttled = 0, false
	} else {
		if dt < minSampleWindow {
			return
		}
		x = float64(r.gauge.samplePeak())
	}
	r.sampledAt = t
	r.est.observe(x, dt)
}

func finiteOr(v, alt float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return alt
	}
	return v
}

// serviceError is the error of a service's error reply.
func serviceError(code int, desc string, retryAfter time.Duration) error {
	return &ServiceError{Code: code, Description: desc, RetryAfter: retryAfter}
}
