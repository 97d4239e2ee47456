// Package domainserver serves allot's domain limits over NATS: the
// Charon-style rate-limited resources (burst tiers) and copy-limited
// resources (holds with domain groups, transfer and seize) of
// docs/domains.md, on the subjects allot.<node>.domain.<op>.<ns>.<resource>
// of subjects.md.
//
// Decisions come from the memory of the partition's elected leader. A
// hold belongs to the client that made it and lives as long as that
// client refreshes it, so a client that dies loses its holds within the
// hold TTL. Hold counts are not written anywhere on the hot path: a new
// leader rebuilds them from the holders' refreshes, and grants no new
// copies until it has heard from every live holder (it is "learning" for
// one hold TTL). Transfers, which no holder refreshes, are written to the
// KV state bucket, so a failover keeps them too. docs/domains.md explains the choice.
package domainserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/statekv"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/version"
	"github.com/allot/allot/status"
)

// Defaults and limits of Options.
const (
	// ServiceName is the NATS micro service a partition's leader registers.
	ServiceName = status.DomainService
	// ServiceVersion is reported in the micro service INFO: allot's
	// version.
	ServiceVersion = version.Version
	// DefaultHoldTTL is how long a hold lives without a refresh.
	DefaultHoldTTL = 10 * time.Second
	// MinHoldTTL and MaxHoldTTL bound Options.HoldTTL.
	MinHoldTTL = 100 * time.Millisecond
	MaxHoldTTL = domainwire.MaxHoldTTL
	// DefaultStateBucket keeps staged transfers: "allot_state", the
	// coordinators' state bucket.
	DefaultStateBucket = statekv.DefaultBucket
	// MaxPartitions bounds Options.Partitions.
	MaxPartitions = 1024
	// MinSealTTL is the shortest default Options.SealTTL.
	MinSealTTL = time.Minute
)

// Config supplies the domain-limit namespaces a server decides for. Make
// it with ParseDomains; `allot quota` follows the configuration bucket
// instead. Only allot implements it: the compiled namespaces are the
// server's own business. A nil Config is none: Options.Config is
// required.
type Config interface {
	sources.Domains
}

// ParseDomains returns a Config that always serves the given domain-limit
// namespaces: docs maps a namespace's name to its document, YAML or JSON,
// as stored under domains.<name> in the allot_config bucket and as `allot
// config put` takes it (docs/domains.md). An invalid document is an error
// naming it and every problem found in it.
//
// It is for a server embedded in a program that has no configuration
// bucket (a demo, a test); `allot quota` watches the bucket instead, so
// namespaces change without a restart.
func ParseDomains(docs map[string][]byte) (Config, error) {
	nss, err := config.ParseEach("namespace", docs, func(name string, doc []byte) (*domainlimit.Namespace, error) {
		ns, _, err := config.ParseDomains(name, 1, doc)
		return ns, err
	})
	if err != nil {
		return nil, fmt.Errorf("domainserver: %w", err)
	}
	byName := make(map[string]*domainlimit.Namespace, len(nss))
	for _, ns := range nss {
		byName[ns.Name] = ns
	}
	return sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return byName }), nil
}

// Options configure a Server: the serving side of one partition for one
// leadership term.
type Options struct {
	// Node is the tree node served; it names the subjects. Default "root".
	Node string
	// ServerID identifies this replica: to the election, in STATS, the
	// service's metadata and the logs. Default host:pid.
	ServerID string
	// Partition is the partition served, in [0, Partitions).
	Partition int
	// Partitions is how many partitions share the node's domain-limit
	// namespaces, each elected and served on its own subjects: 1 (the
	// default) to MaxPartitions. For N > 1 the NATS server needs the subject
	// mappings of subjects.md, "Domain limits", "Partitions" (`allot up`
	// sets them).
	Partitions int
	// Config returns the configuration in force. Required.
	Config Config
	// HoldTTL is how long a hold lives without a refresh; agents refresh
	// every third of it. Default DefaultHoldTTL.
	HoldTTL time.Duration
	// LearnUntil: until then the server grants no copies, and adopts the
	// holds its clients' refreshes list (a new leader rebuilding what its
	// predecessor granted). Zero: no learning (a fresh deployment).
	LearnUntil time.Time
	// JetStream, if set, keeps staged transfers in StateBucket so that a
	// new leader finds them. Without it they live in memory only.
	JetStream jetstream.JetStream
	// StateBucket is the KV bucket for transfers. Default
	// DefaultStateBucket.
	StateBucket string
	// StateReplicas is the state bucket's replica count when this server
	// creates it (the coordinators create the same bucket alike,
	// whichever comes first). Default 1; use 3 on a three-server cluster.
	StateReplicas int
	// SealKey is the key that seals holds (the replies' "seal", which
	// vouches for a hold to a new leader); a node's replicas must share
	// it, at least 16 bytes. Default: the
	// key kept in StateBucket (created by the first replica) with
	// JetStream, a random one without.
	SealKey []byte
	// SealTTL is how long a seal vouches for its hold to a new leader. It
	// must cover a failover: the last refresh before the old leader died,
	// the election, and the first refresh to the new one. Default three
	// hold TTLs, at least MinSealTTL.
	SealTTL time.Duration
	// Term is the leadership term, reported in STATS. Default 1.
	Term uint64
	// Valid, if set, reports whether this server may still answer: its
	// leadership has not lapsed. It is checked before every reply; once
	// false the server is silent for good (Done).
	Valid func() bool
	// Intake bounds the requests taken up and not yet answered, and each
	// tenant's request rate (the zero value has the defaults and no
	// tenant rate). See subjects.md, "Overload".
	Intake intake.Limits
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// fill validates o and fills its defaults.
func (o *Options) fill() error {
	if err := leader.FillPartition("domainserver", &o.Node, &o.ServerID, o.Partition, &o.Partitions, MaxPartitions); err != nil {
		return err
	}
	if o.Config == nil {
		return errors.New("domainserver: Options.Config is required")
	}
	if o.HoldTTL == 0 {
		o.HoldTTL = DefaultHoldTTL
	}
	if o.HoldTTL < MinHoldTTL || o.HoldTTL > MaxHoldTTL {
		return fmt.Errorf("domainserver: hold TTL %v: want %v to %v", o.HoldTTL, MinHoldTTL, MaxHoldTTL)
	}
	if o.StateBucket == "" {
		o.StateBucket = DefaultStateBucket
	}
	if o.StateReplicas < 0 {
		return fmt.Errorf("domainserver: state bucket replicas %d: want at least 1", o.StateReplicas)
	}
	if o.SealKey != nil && len(o.SealKey) < SealKeyLen/2 {
		return fmt.Errorf("domainserver: seal key of %d bytes: want at least %d", len(o.SealKey), SealKeyLen/2)
	}
	if o.SealTTL == 0 {
		o.SealTTL = max(3*o.HoldTTL, MinSealTTL)
	}
	if o.SealTTL < o.HoldTTL {
		return fmt.Errorf("domainserver: seal TTL %v is shorter than the hold TTL %v", o.SealTTL, o.HoldTTL)
	}
	leader.FillTerm(&o.Term, &o.Logger, &o.Now)
	return nil
}

// Server answers one partition's domain requests. Create it with New,
// then Start; Stop it when its leadership ends.
type Server struct {
	nc   *nats.Conn
	opts Options
	log  *slog.Logger

	// mu guards the state: the handlers run on one subscription each and
	// the sweeper on its own goroutine.
	mu        sync.Mutex
	resources map[string]*resource
	holds     holdStore
	// epoch is the origin of the holds' expiry offsets.
	epoch time.Time
	// kept are the domain and client id strings of recent requests
	// (name), and names is name, made once.
	kept  map[string]string
	names domainwire.Names
	// calls recycles the scratch of a request (call).
	calls     sync.Pool
	transfers map[string]*transfer
	// transfersDue: no transfer expires before it (zero: none staged);
	// see expireTransfers.
	transfersDue time.Time
	// seized maps a hold made by a seize to its transfer's record.
	seized map[string]*transfer
	// ended holds the ids of holds forgotten while learning: they are not
	// adopted again.
	ended map[string]struct{}
	kv    jetstream.KeyValue
	// rev is the revision of the transfers key this server last read or
	// wrote (0: create it), and written the value it last tried to
	// write: writes compare and set on rev, so that a deposed leader
	// cannot overwrite its successor's transfers.
	rev     uint64
	written []byte
	counts  Counts
	// sealKey seals holds (seal.go), macKey is its HighwayHash key and
	// macIn the buffer sealInput reuses.
	sealKey, macKey []byte
	macIn           []byte

	// gate says whether replies may still be sent.
	gate *leader.Gate
	// term serves the endpoints while the server runs.
	term *leader.Term
}

// New validates opts and returns a Server that is not yet serving.
func New(nc *nats.Conn, opts Options) (*Server, error) {
	if nc == nil {
		return nil, errors.New("domainserver: nil NATS connection")
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	log := opts.Logger.With("node", opts.Node, "domain_partition", opts.Partition, "server_id", opts.ServerID)
	s := &Server{nc: nc, opts: opts, log: log, gate: leader.NewGate(opts.Valid, log, "domain partition"),
		epoch: opts.Now(), resources: map[string]*resource{}, transfers: map[string]*transfer{}, seized: map[string]*transfer{}, ended: map[string]struct{}{}}
	s.names = s.name
	return s, nil
}

// tenantOf names the tenant a tenant subject speaks for.
func tenantOf(subject string) string {
	tenant, _, _, _, _ := domainwire.ParseTenantSubject(subject)
	return tenant
}

// Start loads the staged transfers, registers the micro service and
// starts sweeping expired holds. It returns once the subscriptions are
// live at the server.
func (s *Server) Start(ctx context.Context) error {
	if s.term != nil {
		return errors.New("domainserver: already started")
	}
	s.sealKey = s.opts.SealKey
	if s.opts.JetStream != nil {
		if err := s.loadTransfers(ctx); err != nil {
			return err
		}
		if s.sealKey == nil {
			if err := s.loadSealKey(ctx); err != nil {
				return err
			}
		}
	}
	if s.sealKey == nil {
		s.sealKey = newSealKey()
	}
	staged := s.stagedLocked() // before the handlers may change it
	node := s.opts.Node
	// With one partition the plain subjects are served directly; with more
	// the NATS server maps them onto the partitions' subjects.
	// Tenants' requests arrive through their service imports on
	// allot.t.<tenant>.<node>.domain.… (TenantSubject), mapped the same way.
	subject, tenants := subjects.DomainAll(node), subjects.TenantDomainAll(node)
	if s.opts.Partitions > 1 {
		p := domainwire.PartitionSubject(node, s.opts.Partition)
		subject, tenants = p+".*.*.*", p+".t.*.*.*.*"
	}
	term, err := leader.Start(ctx, s.nc, leader.Spec{
		Name: ServiceName, Version: ServiceVersion,
		Description: "allot domain limits: node " + node + ", partition " + strconv.Itoa(s.opts.Partition) + " of " + strconv.Itoa(s.opts.Partitions),
		Node:        node, ServerID: s.opts.ServerID, Term: s.opts.Term, Partition: s.opts.Partition, Partitions: s.opts.Partitions,
		Stats: func() any { return s.Stats() }, Gate: s.gate, Logger: s.log,
		Endpoints: []leader.Endpoint{{Name: "domain", Subject: subject, Handle: s.handle, Deferred: true},
			{Name: "domain-tenants", Subject: tenants, Handle: s.handle, Tenant: tenantOf, Deferred: true}},
		Limits: s.opts.Intake,
		ErrorBody: func(_ nats.Header, code int, text string, retry time.Duration) []byte {
			b, _ := json.Marshal(domainwire.ErrorReply{Code: code, Error: text, RetryAfterMillis: retry.Milliseconds()})
			return b
		},
		// Expired holds and transfers go every quarter hold TTL.
		TickEvery: s.opts.HoldTTL / 4, Tick: func() { s.expire(s.opts.Now()) },
	})
	if err != nil {
		return fmt.Errorf("domainserver: %w", err)
	}
	s.term = term
	s.log.Info("domain partition serving", "subjects", subject, "term", s.opts.Term, "hold_ttl", s.opts.HoldTTL,
		"learning_until", s.opts.LearnUntil, "transfers", staged)
	return nil
}

// Stop unsubscribes, answers the requests already delivered and stops
// sweeping. After it the server is silent.
func (s *Server) Stop() {
	if s.term != nil {
		s.term.Stop()
	}
}

// Done is closed when the server stops answering on its own: Valid turned
// false. Err says why. Call Stop after it.
func (s *Server) Done() <-chan struct{} { return s.gate.Done() }

// Err returns why the server stopped answering on its own, or nil.
func (s *Server) Err() error { return s.gate.Err() }

// mayAnswer reports whether replies may be sent: not stopped, not failed,
// and Valid (if set) still holds.
func (s *Server) mayAnswer() bool { return s.gate.Open() }

// Counts are the server's event counters (status.DomainCounts).
type Counts = status.DomainCounts

// Stats is the "data" of the domain service's micro STATS
// (status.Domain).
type Stats = status.Domain

// Stats returns the server's state and counters; safe for concurrent use.
func (s *Server) Stats() Stats {
	st := Stats{PartitionLeader: s.gate.PartitionStatus(s.opts.Node, s.opts.ServerID, s.opts.Partition, s.opts.Partitions, s.opts.Term), LearnUntil: s.opts.LearnUntil, Silenced: s.gate.Silenced.Load()}
	st.Learning = s.opts.Now().Before(s.opts.LearnUntil)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireTransfers(s.opts.Now())
	st.DomainCounts = s.counts
	st.Resources, st.Holds, st.Transfers = len(s.resources), s.holds.len(), s.stagedLocked()
	s.holds.all(func(h *hold) { st.CopiesHeld += h.copies })
	for _, t := range s.transfers {
		if t.staged() {
			st.CopiesHeld += t.copies
		}
	}
	return st
}

// stagedLocked counts the transfers not yet seized. Called with s.mu held
// (or before the server answers).
func (s *Server) stagedLocked() int {
	n := 0
	for _, t := range s.transfers {
		if t.staged() {
			n++
		}
	}
	return n
}
