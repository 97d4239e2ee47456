// Package coordinator implements allot's coordinator: it apportions each
// resource's capacity among the clients that ask for it and answers with
// leases, in allocation rounds, over NATS request-reply.
//
// A Coordinator serves one tree node. It registers the NATS micro service
// "allot" with endpoints on allot.<node>.capacity.get,
// allot.<node>.capacity.release and allot.<node>.server.get, and on the
// tenant subjects allot.t.<tenant>.<node>.capacity.get and .release (see
// subjects.md), queues the requests that arrive while a round runs (or
// during a round interval, if one is set), updates each touched
// resource's shares for the clients that asked, and answers every
// waiting requester.
package coordinator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/reply"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/statekv"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/version"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/status"
)

// Defaults for Options.
const (
	DefaultNode = "root"
	// DefaultRoundInterval is 0: each round takes whatever requests
	// queued while the previous one ran. A round costs O(log n) per
	// client that asked, so batching buys little and a round interval
	// only adds latency (and, with requests in flight bounded, caps
	// throughput at in-flight ÷ interval).
	DefaultRoundInterval = 0
	// DefaultStateBucket is the KV bucket of the lease records,
	// "allot_state".
	DefaultStateBucket = statekv.DefaultBucket
	// ServiceName is the NATS micro service name coordinators register.
	ServiceName = status.CoordinatorService
	// DefaultMaxResources is the default Options.MaxResources: 100,000.
	DefaultMaxResources = ledger.DefaultMaxResources
	// DefaultMaxClients is the default Options.MaxClients: 2,000,000.
	DefaultMaxClients = ledger.DefaultMaxClients
	// MaxRoundInterval bounds Options.RoundInterval.
	MaxRoundInterval = 50 * time.Millisecond
	// DefaultClockSkew is the default Options.ClockSkew: 2s.
	DefaultClockSkew = ledger.DefaultClockSkew
	// DefaultCeilingHeadroom is the default Options.CeilingHeadroom:
	// 0.1.
	DefaultCeilingHeadroom = ledger.DefaultCeilingHeadroom
	// DefaultChildMaxClients is the default Options.ChildMaxClients:
	// 10,000.
	DefaultChildMaxClients = ledger.DefaultChildMaxClients
)

// ServiceVersion is reported in the micro service INFO: allot's version.
const ServiceVersion = version.Version

// TemplateSource provides the resource templates a coordinator serves.
// Make one with ParseTemplates (the documents `allot config put` takes),
// TemplatesFromProto or DefaultTemplates; `allot coordinator` follows the
// configuration bucket instead. Only allot implements it: the compiled
// templates are the coordinator's own business.
type TemplateSource interface {
	sources.Templates
}

// StatusSource is implemented by template sources that can report their
// status (applied and rejected versions); it is published in micro STATS.
type StatusSource interface {
	Status() any
}

// templateSet returns the templates in force.
func (c *Coordinator) templateSet() *config.Set { return sources.CurrentTemplates(c.opts.Templates) }

// DefaultTemplates is the source used when Options.Templates is nil: no
// templates, and the built-in default template for every resource.
func DefaultTemplates() TemplateSource {
	return sources.StaticTemplates(config.NewSet(1, nil, config.DefaultTemplate()))
}

// Options configure a Coordinator. The zero value is usable.
type Options struct {
	// Node is the tree node served; it names the subjects. Default "root".
	Node string
	// ServerID identifies this replica: to the election, in STATS, the
	// service's metadata and the logs. Default host:pid.
	ServerID string
	// Partition is the partition served, in [0, Partitions).
	Partition int
	// Partitions is how many partitions share the node's lease resources,
	// each elected and served on its own subjects: 1 (the default) to 256
	// (subjects.md, "Lease partitions"). Clients pick a resource's partition
	// themselves, so no subject mapping is needed; with 1 the node keeps its
	// plain subjects, election key and lease record.
	Partitions int
	// RoundInterval is the length of an allocation round: requests arriving
	// during one are answered together at its end. 0 (the default,
	// DefaultRoundInterval; NoRoundInterval says it explicitly) answers
	// each request at once, whatever queued meanwhile batched with it. At
	// most 50ms.
	RoundInterval time.Duration
	// Parent names the parent node (toward the root) whose coordinator
	// this one gets its capacity from, over allot.<Parent>.server.get
	// (through a leaf-node connection). Empty: this node is a root and
	// its templates' capacities are its own.
	Parent string
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
	// that clients naming ever new resources cannot exhaust memory. A
	// request that would pass it gets error 429. Default 100,000
	// (DefaultMaxResources). The lease record's size (512 KiB, about 280
	// bytes plus the id per resource) bounds the resources it summarizes:
	// the others are served unlisted, in a record marked incomplete.
	MaxResources int
	// MaxClients bounds the client records the node keeps (one per client
	// and resource; a record lives until a lease length after the client
	// was last seen). A request that would pass it gets 429. Default
	// 2,000,000 (DefaultMaxClients): some 300 bytes a record, about 600 MB
	// (bench/README.md, scale).
	MaxClients int
	// TenantMaxResources and TenantMaxClients bound, per tenant (a NATS
	// account whose requests come through its service import), the
	// resources of the node it has clients on and the client records it
	// keeps, whatever the templates say: a request that would pass one
	// gets 429 for that resource (STATS tenant_capped). So one tenant
	// cannot fill MaxResources or MaxClients and lock every other tenant
	// out of new resources. Plain clients and child nodes are not bounded
	// by them. Default a tenth of MaxResources and of MaxClients; at most
	// those.
	TenantMaxResources int
	TenantMaxClients   int
	// ChildMaxClients bounds how many clients a child node's band counts
	// for in the share algorithms, whatever the child claims: a
	// compromised child level that claims a huge num_clients is counted
	// at the bound (STATS child_capped), so it cannot take the node's
	// capacity from the node's own clients. Default
	// DefaultChildMaxClients (10,000).
	ChildMaxClients int64
	// ChildClients sets that bound per child node, by node name, in place
	// of ChildMaxClients: the number of clients the operator expects
	// behind that child. Each bound is positive.
	ChildClients map[string]int64
	// Valid, if set, reports whether this coordinator may still answer:
	// a replica's leadership has not lapsed on its monotonic clock. It is
	// checked before every reply; once false the coordinator is silent
	// (another replica answers: the subjects have no queue group) and
	// stops. A process frozen past its lease so never answers with its
	// old term.
	Valid func() bool
	// TermBound, if set, returns the highest term any leader of the node
	// can hold (the election stream's last sequence). A lease record of a
	// higher term cannot be genuine: it is reported and overwritten, never
	// obeyed.
	TermBound func(ctx context.Context) (uint64, error)
	// PriorLeader, if set, reports whether the node has had a leader
	// before (and records that it now has). Without it, only the state
	// bucket tells whether a missing lease record means a new deployment.
	PriorLeader func(ctx context.Context) (bool, error)
	// Shadow runs every resource in shadow mode, whatever its template
	// says: leases are allocated and reported as usual, but every reply
	// says shadow, so agents admit what they want and count what the
	// grant would have refused. For introducing allot in front of a
	// service without refusing anything.
	Shadow bool
	// Beside, if set, is a second connection to the same NATS servers
	// (with the same credentials and TLS) on which the coordinator serves
	// the holders'
	// refreshes (capacity.refresh) and writes its lease record: these
	// then queue behind nothing of a flood of other requests, at the
	// server or here. A Replica opens one. Nil: they share the
	// connection.
	Beside *nats.Conn
	// Intake bounds the requests taken up and not yet answered, and the
	// rate of each tenant's (the zero value has the
	// defaults, and no tenant rate): past them a request gets 503 or
	// 429 at once, with a retry_after. See subjects.md, "Overload".
	Intake intake.Limits
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

// Coordinator serves one tree node. Create it with New, then Start.
type Coordinator struct {
	nc    *nats.Conn
	opts  Options
	log   *slog.Logger
	now   func() time.Time
	term  uint64
	round time.Duration

	// requests recycles request objects and their decoded messages
	// (newRequest).
	requests sync.Pool
	// ids makes the resource ids of decoded requests: the ones seen
	// before are not allocated again (wire.IDCache).
	ids wire.Names

	// Reply buffers, owned by the round loop.
	leaseBuf []wire.LeaseReply
	replyBuf []byte
	replyMsg nats.Msg
	// jsonHeader is the header of JSON replies, made once; pbHeader that
	// of binary ones (nil without lease partitions).
	jsonHeader, pbHeader nats.Header

	calls calls // requests and error replies (see observe.go)
	// gate says whether replies may still be sent: not once a newer
	// leader deposed this one or its leadership lapsed.
	gate *leader.Gate

	mu        sync.Mutex
	closed    bool // Stop has ended the round loop
	pending   []*request
	spare     []*request // the list pending was last, for takeBatch to reuse
	statsSnap stats      // copy of stats for the STATS handler
	wake      chan struct{}
	// urge: a child node's request is queued. Its round runs at once
	// rather than after the round interval: what a child asks for (or
	// gives back) moves through every level of the tree, each level's
	// batching delay adds up, and children's requests are few.
	urge chan struct{}

	// serve serves the endpoints from Start until Stop; live is it too,
	// for the STATS handler, which may run before Start has set serve.
	serve   *leader.Term
	live    atomic.Pointer[leader.Term]
	bulk    *bulkLane
	started time.Time
	stop    chan struct{}
	done    chan struct{}

	store *recordStore
	up    *upstream // nil on a root node
	known *holders  // clients holding leases, for the intake

	// Owned by the round loop.
	holdersBuf, newcomersBuf []*request // takeBatch's lists
	firstBuf                 []*request // takeHolders' list
	ledger                   *ledger.Ledger
	waiting                  []*request // applied, waiting for their resources' record
	// newcomers bounds the newcomers' requests of a round (adapt).
	newcomers int
	stats     stats
	writes    writeTimes // lease-record writes, for logCuts
	snap      snapState  // Snapshot's requests to the round loop, and its cache
}

// New validates opts and returns a Coordinator that is not yet serving.
func New(nc *nats.Conn, opts Options) (*Coordinator, error) {
	if nc == nil {
		return nil, errors.New("coordinator: nil NATS connection")
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	skew := opts.ClockSkew
	if skew == 0 {
		skew = -1 // the ledger's "none"
	}
	c := &Coordinator{
		ids:       wire.NewIDCache().Name,
		nc:        nc,
		opts:      opts,
		log:       opts.Logger.With("node", opts.Node, "server_id", opts.ServerID),
		now:       opts.Now,
		term:      opts.Term,
		round:     opts.RoundInterval,
		wake:      make(chan struct{}, 1),
		urge:      make(chan struct{}, 1),
		gate:      leader.NewGate(opts.Valid, opts.Logger.With("node", opts.Node, "server_id", opts.ServerID), "coordinator"),
		snap:      snapState{q: make(chan snapRequest)},
		known:     newHolders(opts.MaxClients),
		newcomers: 1024,
		ledger: ledger.New(ledger.Config{
			Node: opts.Node, ServerID: opts.ServerID, Term: opts.Term, Partitions: opts.Partitions,
			ClockSkew: skew, CeilingHeadroom: opts.CeilingHeadroom,
			MaxResources: opts.MaxResources, MaxClients: opts.MaxClients,
			TenantMaxResources: opts.TenantMaxResources, TenantMaxClients: opts.TenantMaxClients,
			ChildMaxClients: opts.ChildMaxClients, ChildClients: opts.ChildClients,
			MinRefresh: max(opts.RoundInterval, ledger.DefaultMinRefresh),
			Child:      opts.Parent != "",
			HolderKey:  newHolderKey(),
		}),
	}
	if c.partitioned() {
		c.pbHeader = nats.Header{}
		c.partitionsHeader(&nats.Msg{Header: c.pbHeader})
	}
	return c, nil
}

// newHolderKey draws the key of the holder digests of this term's lease
// records: secret, so that no client can make up ids that match a
// digest (a successor would take them for the holders' return and lease
// out what the holders still use). Only the coordinators can read the
// state bucket the records are in (subjects.md).
func newHolderKey() (k [ledger.HolderKeySize]byte) {
	rand.Read(k[:]) // never fails: it aborts the program rather than return short
	return k
}

// fill validates o and fills its defaults.
func (o *Options) fill() error {
	if err := leader.FillPartition("coordinator", &o.Node, &o.ServerID, o.Partition, &o.Partitions, subjects.MaxLeasePartitions); err != nil {
		return err
	}
	switch {
	case o.RoundInterval == 0:
		o.RoundInterval = DefaultRoundInterval
	case o.RoundInterval < 0:
		o.RoundInterval = 0
	case o.RoundInterval > MaxRoundInterval:
		return fmt.Errorf("coordinator: round interval %v is above the maximum %v", o.RoundInterval, MaxRoundInterval)
	}
	if o.Templates == nil {
		o.Templates = DefaultTemplates()
	}
	if o.Parent != "" && (subjects.ValidateNode(o.Parent) != nil || o.Parent == o.Node) {
		return fmt.Errorf("coordinator: parent node %q must be a valid node name (1-64 of [A-Za-z0-9_-], not t) and not the node itself", o.Parent)
	}
	if o.StateBucket == "" {
		o.StateBucket = DefaultStateBucket
	}
	if o.StateReplicas == 0 {
		o.StateReplicas = 1
	}
	switch {
	case o.MaxResources == 0:
		o.MaxResources = DefaultMaxResources
	case o.MaxResources < 0:
		return fmt.Errorf("coordinator: max resources %d is negative", o.MaxResources)
	}
	switch {
	case o.MaxClients == 0:
		o.MaxClients = DefaultMaxClients
	case o.MaxClients < 0:
		return fmt.Errorf("coordinator: max clients %d is negative", o.MaxClients)
	}
	if err := o.fillIsolation(); err != nil {
		return err
	}
	if err := leader.FillClockSkew("coordinator", &o.ClockSkew, DefaultClockSkew); err != nil {
		return err
	}
	if o.CeilingHeadroom == 0 {
		o.CeilingHeadroom = DefaultCeilingHeadroom
	}
	if o.CeilingHeadroom < 0 || o.CeilingHeadroom > 1 {
		return fmt.Errorf("coordinator: ceiling headroom %v must be in (0, 1]", o.CeilingHeadroom)
	}
	leader.FillTerm(&o.Term, &o.Logger, &o.Now)
	return nil
}

// fillIsolation validates and fills the caps per tenant and the bounds
// of child nodes' claims.
func (o *Options) fillIsolation() error {
	for _, c := range []struct {
		what, node string
		v          *int
		limit      int
	}{
		{"tenant max resources", "max resources", &o.TenantMaxResources, o.MaxResources},
		{"tenant max clients", "max clients", &o.TenantMaxClients, o.MaxClients},
	} {
		switch {
		case *c.v == 0:
			*c.v = max(c.limit/10, 1)
		case *c.v < 0:
			return fmt.Errorf("coordinator: %s %d is negative", c.what, *c.v)
		case *c.v > c.limit:
			return fmt.Errorf("coordinator: %s %d is above the node's %s %d: a tenant's share of the node cannot be more than the node", c.what, *c.v, c.node, c.limit)
		}
	}
	switch {
	case o.ChildMaxClients == 0:
		o.ChildMaxClients = DefaultChildMaxClients
	case o.ChildMaxClients < 0:
		return fmt.Errorf("coordinator: child max clients %d is negative", o.ChildMaxClients)
	}
	// A copy: the ledger reads it on the round loop, the caller's map may
	// change.
	o.ChildClients = maps.Clone(o.ChildClients)
	for _, child := range slices.Sorted(maps.Keys(o.ChildClients)) {
		n := o.ChildClients[child]
		if err := subjects.ValidateNode(child); err != nil {
			return fmt.Errorf("coordinator: child clients: %q: %w", child, err)
		}
		if child == o.Node || child == o.Parent {
			return fmt.Errorf("coordinator: child clients: %q is this node or its parent, not a child", child)
		}
		if n <= 0 {
			return fmt.Errorf("coordinator: child clients: %q: bound %d is not positive", child, n)
		}
	}
	return nil
}

// Subject returns the subject of endpoint ("capacity.get",
// "capacity.release" or "server.get") for node.
func Subject(node, endpoint string) string { return subjects.Coordinator(node, endpoint) }

// TenantSubject returns the subject on which tenant's requests for
// endpoint ("capacity.get" or "capacity.release") of node arrive in the
// allot account, once its service import has mapped them (see
// subjects.md).
func TenantSubject(tenant, node, endpoint string) string {
	return subjects.TenantCoordinator(tenant, node, endpoint)
}

// Start prepares the state bucket, reads the lease record to decide on
// learning mode, writes the record under its own term, registers the
// micro service and starts the round loop. It returns once the
// coordinator is serving.
func (c *Coordinator) Start(ctx context.Context) error {
	if c.serve != nil {
		return errors.New("coordinator: already started")
	}
	// The lease record's writes and their acknowledgements must not wait
	// behind a flood of requests either: a write that times out holds
	// grants to the recorded ceilings and cuts leases short.
	kvConn := c.nc
	if c.opts.Beside != nil {
		kvConn = c.opts.Beside
	}
	js, err := jetstream.New(kvConn)
	if err != nil {
		return fmt.Errorf("coordinator: jetstream: %w", err)
	}
	c.store = newRecordStore(js, c.opts, c.log)
	c.started = c.now()
	if err := c.takeOver(ctx); err != nil {
		return err
	}

	c.bulk = newBulkLane(c)
	node := c.opts.Node
	term, err := leader.Start(ctx, c.nc, leader.Spec{
		Name: ServiceName, Version: ServiceVersion, Description: c.description(),
		Node: node, ServerID: c.opts.ServerID, Term: c.Term(), Stats: c.statsData, Gate: c.gate, Logger: c.log,
		Partition: c.opts.Partition, Partitions: c.partitionsMeta(),
		Endpoints: c.endpoints(),
		Limits:    c.opts.Intake,
		Beside:    c.opts.Beside,
		Classify:  c.known.classify,
		ErrorBody: func(h nats.Header, code int, text string, retry time.Duration) []byte {
			return reply.RefusalBody(wire.EncodingOf(h), code, text, retry)
		},
		Close: c.closeServing,
	})
	if err != nil {
		c.bulk.close()
		return fmt.Errorf("coordinator: %w", err)
	}
	c.serve = term
	c.live.Store(term)
	c.stop = make(chan struct{})
	c.done = make(chan struct{})
	c.store.start()
	if c.opts.Parent != "" {
		c.up = newUpstream(c)
	}
	go c.loop()
	until, complete := c.ledger.Learning()
	c.log.Info("coordinator serving", "subjects", c.leaseSubject("capacity.*"), "partition", c.opts.Partition, "partitions", c.opts.Partitions, "round", c.round,
		"learning_until", time.Unix(0, until), "predecessor_complete", complete)
	return nil
}

// Stop stops serving: it drains the service's subscriptions, answers every
// request they had delivered and waits for the round loop to end. Leases
// stay recorded in the lease record so a successor knows to learn.
func (c *Coordinator) Stop() {
	if c.serve != nil {
		c.serve.Stop()
	}
}

// Done is closed when the coordinator stops serving on its own: a newer
// leader's lease record deposed it, or Valid turned false. Err says why.
// Call Stop after it.
func (c *Coordinator) Done() <-chan struct{} { return c.gate.Done() }

// Err returns why the coordinator stopped serving on its own, or nil.
func (c *Coordinator) Err() error { return c.gate.Err() }

// closeServing runs in Stop once every delivered request has been taken
// up: it answers every queued request and ends the round loop.
func (c *Coordinator) closeServing() {
	c.store.cancel()
	c.bulk.close()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	c.store.wait()
	c.up.close()
}

// serving reports whether the coordinator serves, and why not if it
// stopped on its own.
func (c *Coordinator) serving() (bool, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	err := c.gate.Err()
	return !closed && err == nil, err
}

// Term returns the fencing term in force.
func (c *Coordinator) Term() uint64 { return c.term }

// Node returns the node this coordinator serves.
func (c *Coordinator) Node() string { return c.opts.Node }

// enqueue hands a decoded request to the round loop. After Stop nothing
// is answered: another replica answers (the subjects have no queue
// group), and a requester with none gets no-responders or a time-out.
func (c *Coordinator) enqueue(r *request) {
	// Which loop channel to wake is read before r is queued: once queued,
	// the round loop may answer r and recycle it for another request.
	wake := c.wake
	if r.kind == kindServer {
		wake = c.urge
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.gate.Silenced.Add(1)
		leader.Finish(r.msg)
		return
	}
	c.pending = append(c.pending, r)
	c.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}
