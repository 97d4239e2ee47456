// Package coordinator implements allot's coordinator: it apportions each
// resource's capacity among the clients that ask for it and answers with
// leases, in allocation rounds, over NATS request-reply.
//
// A Coordinator serves one tree node. It registers the NATS micro service
// "allot" with endpoints on allot.<node>.capacity.get,
// allot.<node>.capacity.release and allot.<node>.server.get (see
// subjects.md), queues the requests that arrive during a round interval,
// runs each touched resource's algorithm once over its whole state, and
// answers every waiting requester.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/alloc"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/wire"
)

// Defaults for Options.
const (
	DefaultNode          = "root"
	DefaultRoundInterval = 20 * time.Millisecond
	DefaultStateBucket   = "allot_state"
	// ServiceName is the NATS micro service name coordinators register.
	ServiceName = "allot"
	// DefaultMaxResources is the default Options.MaxResources.
	DefaultMaxResources = 100_000
	// MaxRoundInterval bounds Options.RoundInterval.
	MaxRoundInterval = 50 * time.Millisecond
)

// ServiceVersion is reported in the micro service INFO.
const ServiceVersion = "0.1.0"

// TemplateSource provides the current resource templates.
type TemplateSource interface {
	// Current returns the templates in force; never nil.
	Current() *config.Set
}

// StatusSource is implemented by template sources that can report their
// status (applied and rejected versions); it is published in micro STATS.
type StatusSource interface {
	Status() any
}

type staticTemplates struct{ set *config.Set }

func (s staticTemplates) Current() *config.Set { return s.set }

// StaticTemplates returns a TemplateSource that always returns set.
func StaticTemplates(set *config.Set) TemplateSource { return staticTemplates{set} }

// DefaultTemplates is the source used when Options.Templates is nil: no
// templates and config.DefaultTemplate as fallback.
func DefaultTemplates() TemplateSource {
	return StaticTemplates(config.NewSet(1, nil, config.DefaultTemplate()))
}

// Options configure a Coordinator. The zero value is usable.
type Options struct {
	// Node is the tree node served; it names the subjects. Default "root".
	Node string
	// ServerID identifies this coordinator replica. Default host:pid.
	ServerID string
	// RoundInterval is the length of an allocation round: requests arriving
	// during one are answered together at its end. 0 answers each request
	// at once (whatever is queued is still batched). Default 20ms, at most
	// 50ms. Use a negative value for 0 explicitly via NoRoundInterval.
	RoundInterval time.Duration
	// Templates supply resource configuration. Default DefaultTemplates().
	Templates TemplateSource
	// StateBucket is the KV bucket holding the lease horizon. Default
	// "allot_state".
	StateBucket string
	// StateReplicas is the replica count of the state bucket when this
	// coordinator creates it. Default 1; use 3 on a three-server cluster.
	StateReplicas int
	// Term is the fencing term sent in every response. Default 1. A
	// coordinator never overwrites a lease record of a higher term.
	Term uint64
	// CeilingHeadroom is how far above the outstanding total, as a
	// fraction of capacity, a share resource's published ceiling is set
	// when it must rise, so that the record is not rewritten on every
	// grant. A larger value means fewer writes, a smaller one means a
	// successor can hand out more at once after a failover. Default 0.1.
	CeilingHeadroom float64
	// ClockSkew is the most the clocks of this node's replicas may differ
	// by. Lease times written by a predecessor are only trusted with this
	// margin: a larger value is safer and makes takeovers more cautious.
	// Default 2s (DefaultClockSkew); NoClockSkew for none (replicas on one
	// host).
	ClockSkew time.Duration
	// MaxResources bounds how many resources the node keeps state for, so
	// that clients naming ever new resources cannot exhaust memory or the
	// lease record. A request that would pass it gets error 429. Default
	// 100,000 (DefaultMaxResources).
	MaxResources int
	// Logger receives the coordinator's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock; tests may replace it. Default time.Now.
	Now func() time.Time
}

// NoClockSkew, as Options.ClockSkew, trusts a predecessor's lease times
// exactly: for replicas sharing one clock.
const NoClockSkew = time.Duration(-1)

// NoRoundInterval, as Options.RoundInterval, answers each request at once.
const NoRoundInterval = time.Duration(-1)

var nodeRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Coordinator serves one tree node. Create it with New, then Start.
type Coordinator struct {
	nc    *nats.Conn
	opts  Options
	log   *slog.Logger
	now   func() time.Time
	term  atomic.Uint64
	round time.Duration

	// Reply buffers, owned by the round loop.
	leaseBuf []wire.LeaseReply
	replyBuf []byte

	stopOnce sync.Once
	enqueued atomic.Uint64 // requests queued so far, to see when Stop may end

	mu        sync.Mutex
	closed    bool // Stop has ended the round loop
	pending   []*request
	statsSnap stats // copy of stats for the STATS handler
	wake      chan struct{}

	svc     micro.Service
	kv      jetstream.KeyValue
	started time.Time
	stop    chan struct{}
	// ioCtx bounds the round loop's KV writes; Stop cancels it so that a
	// coordinator cut off from NATS stops at once.
	ioCtx    context.Context
	ioCancel context.CancelFunc
	done     chan struct{}

	// Owned by the round loop.
	resources map[string]*resource
	scratch   alloc.Scratch
	horizon   horizonState
	stats     stats
}

// New validates opts and returns a Coordinator that is not yet serving.
func New(nc *nats.Conn, opts Options) (*Coordinator, error) {
	if nc == nil {
		return nil, errors.New("coordinator: nil NATS connection")
	}
	if opts.Node == "" {
		opts.Node = DefaultNode
	}
	if !nodeRE.MatchString(opts.Node) {
		return nil, fmt.Errorf("coordinator: node name %q must be 1-64 of [A-Za-z0-9_-]", opts.Node)
	}
	if opts.ServerID == "" {
		host, _ := os.Hostname()
		opts.ServerID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	switch {
	case opts.RoundInterval == 0:
		opts.RoundInterval = DefaultRoundInterval
	case opts.RoundInterval < 0:
		opts.RoundInterval = 0
	case opts.RoundInterval > MaxRoundInterval:
		return nil, fmt.Errorf("coordinator: round interval %v is above the maximum %v", opts.RoundInterval, MaxRoundInterval)
	}
	if opts.Templates == nil {
		opts.Templates = DefaultTemplates()
	}
	if opts.StateBucket == "" {
		opts.StateBucket = DefaultStateBucket
	}
	if opts.Term == 0 {
		opts.Term = 1
	}
	if opts.StateReplicas == 0 {
		opts.StateReplicas = 1
	}
	switch {
	case opts.MaxResources == 0:
		opts.MaxResources = DefaultMaxResources
	case opts.MaxResources < 0:
		return nil, fmt.Errorf("coordinator: max resources %d is negative", opts.MaxResources)
	}
	switch {
	case opts.ClockSkew == 0:
		opts.ClockSkew = DefaultClockSkew
	case opts.ClockSkew == NoClockSkew:
		opts.ClockSkew = 0
	case opts.ClockSkew < 0:
		return nil, fmt.Errorf("coordinator: clock skew %v is negative", opts.ClockSkew)
	}
	if opts.CeilingHeadroom == 0 {
		opts.CeilingHeadroom = DefaultCeilingHeadroom
	}
	if opts.CeilingHeadroom < 0 || opts.CeilingHeadroom > 1 {
		return nil, fmt.Errorf("coordinator: ceiling headroom %v must be in (0, 1]", opts.CeilingHeadroom)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Coordinator{
		nc:        nc,
		opts:      opts,
		log:       opts.Logger.With("node", opts.Node, "server_id", opts.ServerID),
		now:       opts.Now,
		round:     opts.RoundInterval,
		wake:      make(chan struct{}, 1),
		resources: make(map[string]*resource),
	}
	c.term.Store(opts.Term)
	return c, nil
}

// Subject returns the subject of endpoint ("capacity.get",
// "capacity.release" or "server.get") for node.
func Subject(node, endpoint string) string { return "allot." + node + "." + endpoint }

// Start prepares the state bucket, reads the lease horizon to decide on
// learning mode, registers the micro service and starts the round loop.
// It returns once the coordinator is serving.
func (c *Coordinator) Start(ctx context.Context) error {
	if c.stop != nil {
		return errors.New("coordinator: already started")
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return fmt.Errorf("coordinator: jetstream: %w", err)
	}
	kv, err := stateBucket(ctx, js, c.opts.StateBucket, c.opts.StateReplicas)
	if err != nil {
		return err
	}
	c.kv = kv
	c.started = c.now()
	if err := c.loadHorizon(ctx); err != nil {
		return err
	}
	if err := c.takeOver(ctx); err != nil {
		return err
	}

	svc, err := micro.AddService(c.nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "allot coordinator: capacity leases for node " + c.opts.Node,
		Metadata:    map[string]string{"node": c.opts.Node, "server_id": c.opts.ServerID, "term": strconv.FormatUint(c.Term(), 10)},
		StatsHandler: func(*micro.Endpoint) any {
			return c.statsData()
		},
	})
	if err != nil {
		return fmt.Errorf("coordinator: register micro service: %w", err)
	}
	g := svc.AddGroup("allot." + c.opts.Node)
	endpoints := []struct {
		name, subject string
		h             micro.HandlerFunc
	}{
		{"capacity_get", "capacity.get", c.handleGet},
		{"capacity_release", "capacity.release", c.handleRelease},
		{"server_get", "server.get", c.handleServerGet},
	}
	for _, e := range endpoints {
		if err := g.AddEndpoint(e.name, e.h, micro.WithEndpointSubject(e.subject),
			micro.WithEndpointMetadata(map[string]string{"node": c.opts.Node})); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("coordinator: add endpoint %s: %w", e.subject, err)
		}
	}
	c.svc = svc
	// Serving means the subscriptions are live at the server: make sure
	// before reporting it, so a request sent right after Start is answered.
	if err := c.nc.FlushTimeout(5 * time.Second); err != nil {
		c.log.Warn("flush after registering endpoints", "err", err)
	}
	c.stop = make(chan struct{})
	c.ioCtx, c.ioCancel = context.WithCancel(context.Background())
	c.done = make(chan struct{})
	go c.loop()
	c.log.Info("coordinator serving", "subjects", Subject(c.opts.Node, "*.*"), "round", c.round,
		"learning_until", c.horizon.learningCap)
	return nil
}

// stateBucket opens the state bucket, creating it if needed. An existing
// bucket is left as configured (an operator may have scaled it).
func stateBucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: "allot coordinator state: lease records per node",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("coordinator: state bucket %q: %w", name, err)
	}
	return kv, nil
}

// Stop stops serving: it drains the service's subscriptions, answers every
// queued request and waits for the round loop to end. Leases stay recorded
// in the lease horizon so a successor knows to learn.
func (c *Coordinator) Stop() {
	if c.stop == nil {
		return
	}
	c.stopOnce.Do(c.stopServing)
	<-c.done
}

// stopServing unsubscribes, answers every request already delivered, and
// ends the round loop.
func (c *Coordinator) stopServing() {
	if c.svc != nil {
		// Drains the endpoints: the server gets the unsubscriptions, while
		// micro still hands us the messages it had already received.
		if err := c.svc.Stop(); err != nil {
			c.log.Warn("stopping micro service", "err", err)
		}
	}
	c.ioCancel()
	// Once the server has the unsubscriptions nothing new arrives; keep
	// running rounds until the delivered requests have all been queued.
	// Cut off from the server (a partition), nothing new can arrive
	// anyway, and waiting on a flush would only delay the stop.
	if c.nc.IsConnected() {
		_ = c.nc.FlushTimeout(250 * time.Millisecond)
	}
	deadline := time.Now().Add(stopGrace)
	for n := c.enqueued.Load(); time.Now().Before(deadline); {
		time.Sleep(stopQuiet)
		m := c.enqueued.Load()
		if m == n {
			break
		}
		n = m
	}
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.log.Info("coordinator stopped")
}

// Stop waits for delivered requests to stop arriving for stopQuiet, and
// for at most stopGrace in all.
const (
	stopQuiet = 20 * time.Millisecond
	stopGrace = 2 * time.Second
)

// Term returns the fencing term in force.
func (c *Coordinator) Term() uint64 { return c.term.Load() }

// Node returns the node this coordinator serves.
func (c *Coordinator) Node() string { return c.opts.Node }

// enqueue hands a decoded request to the round loop; after Stop it
// answers at once that this coordinator no longer serves.
func (c *Coordinator) enqueue(r *request) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.replyError(r.msg, r.enc, CodeUnavailable, "this coordinator has stopped serving; retry (another replica takes over)")
		return
	}
	c.pending = append(c.pending, r)
	c.enqueued.Add(1)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
