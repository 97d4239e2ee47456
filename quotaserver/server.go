// Package quotaserver serves allot's per-request quota decisions over NATS:
// allot.<node>.quota.take and allot.<node>.quota.report (see subjects.md),
// answered at once from the memory of the partition's leader.
//
// Buckets are partitioned by namespace across N groups. Each group is a set
// of Replicas that elect one leader through the KV election bucket (as
// coordinator replicas do); only the leader subscribes, and it checks that
// its leadership is still valid before every reply. A NATS subject mapping
// (Mappings) routes the partitionable subjects
// allot.<node>.quota.take.<namespace>.<name> to the owning group; the plain
// subject, with the bucket in the payload, is served by partition 0's
// leader, which passes each request on, with its reply subject, to the
// owner.
package quotaserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/reply"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/version"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/status"
)

// Defaults and limits of Options.
const (
	// ServiceName is the NATS micro service a partition's serving leader
	// registers; its STATS carry the per-namespace events.
	ServiceName = status.QuotaService
	// ServiceVersion is reported in the micro service INFO: allot's
	// version.
	ServiceVersion = version.Version
	// DefaultSweepInterval is how often idle buckets are dropped.
	DefaultSweepInterval = 5 * time.Second
	// MaxPartitions bounds Options.Partitions.
	MaxPartitions = 1024
)

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
	// Partitions is how many partitions share the node's quota namespaces,
	// each elected and served on its own subjects: 1 (the default) to
	// MaxPartitions. For N > 1 the NATS server needs the subject mappings of
	// subjects.md, "Quota", "Partition mapping" (Mappings; `allot up` sets
	// them).
	Partitions int
	// Config supplies the quota namespaces in force: ParseNamespaces,
	// or the configuration bucket's under `allot up` and `allot quota`.
	// Required.
	Config Config
	// Since is passed to the decision table: buckets first used start as
	// if drained at Since (a new leader's term start). Zero starts them
	// full (the first leader of a fresh deployment).
	Since time.Time
	// Term is the leadership term, reported in STATS. Default 1.
	Term uint64
	// Valid, if set, reports whether this server may still answer: its
	// leadership has not lapsed. It is checked before every reply; once
	// false the server is silent for good (Done).
	Valid func() bool
	// SweepInterval is how often idle buckets are swept. Default 5s.
	SweepInterval time.Duration
	// Shadow answers every take OK, whatever its bucket decides, and
	// counts those the bucket would not have let proceed at once (an
	// OK_WAIT counts too: STATS shadow_would_refuse); a namespace's
	// "shadow": true does the same for its buckets alone.
	Shadow bool
	// Intake bounds the requests taken up and not yet answered, and each
	// tenant's request rate (the zero value has the defaults and no
	// tenant rate). See subjects.md, "Overload".
	Intake intake.Limits
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Config supplies the quota namespaces a server decides for. Make it with
// ParseNamespaces; `allot quota` follows the configuration bucket instead.
// Only allot implements it: the compiled namespaces are the server's own
// business. A nil Config is none: Options.Config is required.
type Config interface {
	sources.Quota
}

// ParseNamespaces returns a Config that always serves the given quota
// namespaces: docs maps a namespace's name to its document, JSON or YAML,
// as stored under namespaces.<name> in the allot_config bucket and as
// `allot config put` takes it (docs/quota.md). An invalid document is an
// error naming it and every problem found in it.
//
// It is for a server embedded in a program that has no configuration
// bucket (a demo, a test); `allot quota` watches the bucket instead, so
// namespaces change without a restart.
func ParseNamespaces(docs map[string][]byte) (Config, error) {
	nss, err := config.ParseEach("namespace", docs, func(name string, doc []byte) (*quota.Namespace, error) {
		ns, _, err := config.ParseNamespace(name, 1, doc)
		return ns, err
	})
	if err != nil {
		return nil, fmt.Errorf("quotaserver: %w", err)
	}
	cfg := config.NewQuotaConfig(nss...)
	return sources.QuotaFunc(func() *quota.Config { return cfg }), nil
}

// Server answers one partition's quota requests. Create it with New, then
// Start; Stop it when its leadership ends.
type Server struct {
	nc   *nats.Conn
	opts Options
	log  *slog.Logger
	// prefix is PartitionSubject and a dot: what the mapping puts before
	// <op>.<namespace>.<name>.
	prefix string

	// gate says whether replies may still be sent.
	gate      *leader.Gate
	forwarded atomic.Uint64
	takes     atomic.Uint64
	reports   atomic.Uint64
	shadowed  shadowCounts

	// table is safe for concurrent use; cfg is the configuration it was
	// last given, and cfgMu orders the hand-overs of new ones.
	table *quota.Table
	cfg   atomic.Pointer[quota.Config]
	cfgMu sync.Mutex

	// term serves the endpoints while the server runs.
	term *leader.Term
}

// New validates opts and returns a Server that is not yet serving.
func New(nc *nats.Conn, opts Options) (*Server, error) {
	if nc == nil {
		return nil, errors.New("quotaserver: nil NATS connection")
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	s := &Server{nc: nc, opts: opts, prefix: PartitionSubject(opts.Node, opts.Partition) + ".",
		log: opts.Logger.With("node", opts.Node, "quota_partition", opts.Partition, "server_id", opts.ServerID)}
	s.gate = leader.NewGate(opts.Valid, s.log, "quota partition")
	cfg := sources.CurrentQuota(opts.Config)
	s.cfg.Store(cfg)
	var since int64 // zero: buckets start full
	if !opts.Since.IsZero() {
		since = opts.Since.UnixNano()
	}
	s.table = quota.NewTable(cfg, quota.Options{Since: since})
	return s, nil
}

// fill validates o and fills its defaults.
func (o *Options) fill() error {
	if err := leader.FillPartition("quotaserver", &o.Node, &o.ServerID, o.Partition, &o.Partitions, MaxPartitions); err != nil {
		return err
	}
	if o.Config == nil {
		return errors.New("quotaserver: Options.Config is required")
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.SweepInterval < 0 {
		return fmt.Errorf("quotaserver: sweep interval %v is negative", o.SweepInterval)
	}
	leader.FillTerm(&o.Term, &o.Logger, &o.Now)
	return nil
}

// tenantOf names the tenant a request's subject speaks for, "" on the
// plain subjects: a tenant's own subject, or a partition's for tenants.
func (s *Server) tenantOf(subject string) string {
	if strings.HasPrefix(subject, subjects.TenantPrefix) {
		return subjects.TenantOf(subject)
	}
	if rest, ok := strings.CutPrefix(strings.TrimPrefix(subject, s.prefix), "t."); ok {
		tenant, _, _ := strings.Cut(rest, ".")
		return tenant
	}
	return ""
}

// Start registers the micro service with the partition's endpoints and
// starts sweeping idle buckets. It returns once the subscriptions are live
// at the server.
func (s *Server) Start(ctx context.Context) error {
	if s.term != nil {
		return errors.New("quotaserver: already started")
	}
	node := s.opts.Node
	eps := []leader.Endpoint{{Name: "partition", Subject: PartitionSubject(node, s.opts.Partition) + ".>", Handle: s.handlePartition}}
	// Tenants' requests arrive through their service imports with the
	// tenant in the subject (allot.t.<tenant>.<node>.quota.…), which the
	// mappings keep.
	tenants := subjects.QuotaTenantPrefix(node) + "."
	if s.opts.Partition == 0 {
		eps = append(eps, leader.Endpoint{Name: "take", Subject: TakeSubject(node), Handle: s.handlePlainTake},
			leader.Endpoint{Name: "report", Subject: ReportSubject(node), Handle: s.handlePlainReport},
			leader.Endpoint{Name: "tenant_take", Subject: tenants + "take", Handle: s.handleTenantTake},
			leader.Endpoint{Name: "tenant_report", Subject: tenants + "report", Handle: s.handleTenantReport})
	}
	if s.opts.Partitions == 1 {
		// One partition owns every bucket: serve the bucket subjects
		// without a mapping. (With one, they arrive on "partition".)
		eps = append(eps, leader.Endpoint{Name: "take_bucket", Subject: TakeSubject(node) + ".*.*", Handle: s.handleBucketTake},
			leader.Endpoint{Name: "report_bucket", Subject: ReportSubject(node) + ".*.*", Handle: s.handleBucketReport},
			leader.Endpoint{Name: "tenant_take_bucket", Subject: tenants + "take.*.*", Handle: s.handleTenantBucketTake},
			leader.Endpoint{Name: "tenant_report_bucket", Subject: tenants + "report.*.*", Handle: s.handleTenantBucketReport})
	}
	for i := range eps {
		eps[i].Tenant = s.tenantOf
	}
	term, err := leader.Start(ctx, s.nc, leader.Spec{
		Name: ServiceName, Version: ServiceVersion,
		Description: "allot quota decisions: node " + node + ", partition " + strconv.Itoa(s.opts.Partition) + " of " + strconv.Itoa(s.opts.Partitions),
		Node:        node, ServerID: s.opts.ServerID, Term: s.opts.Term, Partition: s.opts.Partition, Partitions: s.opts.Partitions,
		Stats: func() any { return s.Stats() }, Endpoints: eps, Gate: s.gate,
		TickEvery: s.opts.SweepInterval, Tick: s.sweep, Logger: s.log,
		Limits: s.opts.Intake,
		ErrorBody: func(h nats.Header, code int, text string, retry time.Duration) []byte {
			return reply.RefusalBody(wire.EncodingOf(h), code, text, retry)
		},
	})
	if err != nil {
		return fmt.Errorf("quotaserver: %w", err)
	}
	s.term = term
	s.log.Info("quota partition serving", "subjects", PartitionSubject(node, s.opts.Partition)+".>", "partitions", s.opts.Partitions,
		"term", s.opts.Term, "buckets_start_full", s.opts.Since.IsZero())
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

// sweep drops idle buckets; the term runs it every SweepInterval.
func (s *Server) sweep() {
	s.refreshConfig()
	if n := s.table.Sweep(s.opts.Now().UnixNano()); n > 0 {
		s.log.Debug("swept idle buckets", "removed", n)
	}
}

// refreshConfig hands the table a configuration published since the last
// request (a hot reload). On the hot path it costs the source's atomic
// load and a comparison.
func (s *Server) refreshConfig() {
	cfg := sources.CurrentQuota(s.opts.Config)
	if cfg == s.cfg.Load() {
		return
	}
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	if cfg = sources.CurrentQuota(s.opts.Config); cfg != s.cfg.Load() {
		s.table.SetConfig(cfg)
		s.cfg.Store(cfg)
	}
}

// Stats is the "data" of the quota service's micro STATS: one partition's
// serving leader (status.Quota).
type Stats = status.Quota

// Stats returns the server's counters; safe for concurrent use.
func (s *Server) Stats() Stats {
	n, ev := s.table.Len(), s.table.Events()
	st := Stats{PartitionLeader: s.gate.PartitionStatus(s.opts.Node, s.opts.ServerID, s.opts.Partition, s.opts.Partitions, s.opts.Term),
		BucketsStartFull: s.opts.Since.IsZero(), Since: s.opts.Since,
		Buckets: n, Takes: s.takes.Load(), Reports: s.reports.Load(), Forwarded: s.forwarded.Load(),
		Silenced: s.gate.Silenced.Load(), Events: ev, Shadow: s.opts.Shadow,
	}
	st.ShadowWouldRefuse, st.ShadowWouldRefuseByNS = s.shadowed.counts()
	return st
}
