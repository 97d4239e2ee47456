// Package envoyserver keeps the window counters of Envoy's rate limit API
// (envoy.service.ratelimit.v3.RateLimitService) in the memory of the
// quota partitions' leaders, and routes the counters of each domain to
// its partition.
//
// A Server is one partition's leader for one term: it answers
// allot.<node>.envoy.count.<token> (internal/envoywire), delivered by the
// NATS subject mapping as allot.<node>.envoy.p.<i>.count.<token>, from an
// envoyrl.MemoryStore. Replicas elect each partition's leader through the
// KV election bucket, as the quota and domain partitions do (election
// key <node>.envoy.<i>). Router is the envoyrl.Store the gRPC front ends
// decide with: a domain's counters are counted by the Server of its
// partition in the same process when there is one, else over NATS.
//
// The partitions know nothing of the rate limit configuration: the front
// ends match descriptors and build the counter keys (internal/envoyrl),
// and a partition only adds hits to keys, so a configuration change never
// waits for a partition.
package envoyserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoywire"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/reply"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/version"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/status"
)

// Names, defaults and limits.
const (
	// ServiceName is the NATS micro service a partition's serving leader
	// registers.
	ServiceName = status.EnvoyService
	// ServiceVersion is reported in the micro service INFO.
	ServiceVersion = version.Version
	// DefaultMaxCounters bounds the counters one partition keeps.
	DefaultMaxCounters = 1 << 20
	// MaxPartitions bounds Options.Partitions, as for the quota partitions.
	MaxPartitions = 1024
	// DefaultClockSkew is Options.ClockSkew's default, the coordinators'.
	DefaultClockSkew = 2 * time.Second
	// NoClockSkew sets Options.ClockSkew to zero.
	NoClockSkew time.Duration = -1
	// sweepEvery is how often expired counters are dropped when no
	// request does it.
	sweepEvery = 5 * time.Second
)

// ErrNotServing is why a Server refuses to count in process: it is not
// (or no longer) the partition's serving leader.
var ErrNotServing = errors.New("envoyserver: this partition server is not serving")

// Options configure a Server: one partition's leader for one term.
type Options struct {
	// Node is the tree node served; it names the subjects. Default "root".
	Node string
	// ServerID identifies this replica: to the election, in STATS, the
	// service's metadata and the logs. Default host:pid.
	ServerID string
	// Partition is the partition served, in [0, Partitions).
	Partition int
	// Partitions is how many partitions share the node's Envoy domains, each
	// elected and served on its own subjects: 1 (the default) to
	// MaxPartitions. For N > 1 the NATS server needs the subject mappings of
	// subjects.md, "Envoy rate limit counters" (envoywire.Mappings; `allot
	// up` sets them).
	Partitions int
	// MaxCounters bounds the counters kept; beyond, a request adding a
	// counter is refused (429). Default DefaultMaxCounters.
	MaxCounters int
	// ClockSkew is the most the front ends' clocks may differ from this
	// one: a counter is kept until its window's end plus it, so that a
	// front end whose clock is behind still counts on it. (Keeping it
	// longer is harmless: the next window has another key.) Default
	// DefaultClockSkew; NoClockSkew for none.
	ClockSkew time.Duration
	// Term is the leadership term, reported in STATS. Default 1.
	Term uint64
	// Valid, if set, reports whether this server may still answer: its
	// leadership has not lapsed. It is checked before every reply; once
	// false the server is silent for good (Done).
	Valid func() bool
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (o *Options) fill() error {
	if err := leader.FillPartition("envoyserver", &o.Node, &o.ServerID, o.Partition, &o.Partitions, MaxPartitions); err != nil {
		return err
	}
	if o.MaxCounters == 0 {
		o.MaxCounters = DefaultMaxCounters
	}
	if o.MaxCounters < 0 {
		return fmt.Errorf("envoyserver: max counters %d is negative", o.MaxCounters)
	}
	if err := leader.FillClockSkew("envoyserver", &o.ClockSkew, DefaultClockSkew); err != nil {
		return err
	}
	leader.FillTerm(&o.Term, &o.Logger, &o.Now)
	return nil
}

// Server counts one partition's Envoy domains. Create it with New, then
// Start; Stop it when its leadership ends.
type Server struct {
	nc   *nats.Conn
	opts Options
	log  *slog.Logger
	gate *leader.Gate
	term *leader.Term

	store envoyrl.MemoryStore

	requests, local, hits, full, overflows atomic.Uint64
}

// New validates opts and returns a Server that is not yet serving.
func New(nc *nats.Conn, opts Options) (*Server, error) {
	if nc == nil {
		return nil, errors.New("envoyserver: nil NATS connection")
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	s := &Server{nc: nc, opts: opts,
		log: opts.Logger.With("node", opts.Node, "envoy_partition", opts.Partition, "server_id", opts.ServerID)}
	s.store.MaxCounters = opts.MaxCounters
	s.gate = leader.NewGate(opts.Valid, s.log, "envoy partition")
	return s, nil
}

// Start registers the micro service with the partition's endpoint and
// returns once its subscriptions are live at the server.
func (s *Server) Start(ctx context.Context) error {
	if s.term != nil {
		return errors.New("envoyserver: already started")
	}
	node, p := s.opts.Node, s.opts.Partition
	eps := []leader.Endpoint{{Name: "count", Subject: envoywire.PartitionSubject(node, p) + ".>", Handle: s.handle}}
	if s.opts.Partitions == 1 {
		// One partition counts every domain: no mapping needed.
		eps = append(eps, leader.Endpoint{Name: "count_domain", Subject: subjects.EnvoyCountSubject(node, "*"), Handle: s.handle})
	}
	term, err := leader.Start(ctx, s.nc, leader.Spec{
		Name: ServiceName, Version: ServiceVersion,
		Description: "allot Envoy rate limit counters: node " + node + ", partition " + strconv.Itoa(p) + " of " + strconv.Itoa(s.opts.Partitions),
		Node:        node, ServerID: s.opts.ServerID, Term: s.opts.Term, Partition: p, Partitions: s.opts.Partitions,
		Stats: func() any { return s.Stats() }, Endpoints: eps, Gate: s.gate,
		TickEvery: sweepEvery, Tick: s.sweep, Logger: s.log,
	})
	if err != nil {
		return fmt.Errorf("envoyserver: %w", err)
	}
	s.term = term
	s.log.Info("envoy partition serving", "subjects", envoywire.PartitionSubject(node, p)+".>", "partitions", s.opts.Partitions, "term", s.opts.Term)
	return nil
}

// Stop unsubscribes and answers the requests already delivered. After it
// the server is silent.
func (s *Server) Stop() {
	if s.term != nil {
		s.term.Stop()
	}
	s.gate.Close()
}

// Done is closed when the server stops answering on its own: Valid turned
// false. Err says why. Call Stop after it.
func (s *Server) Done() <-chan struct{} { return s.gate.Done() }

// Err returns why the server stopped answering on its own, or nil.
func (s *Server) Err() error { return s.gate.Err() }

// Serving reports whether the server may count and answer now.
func (s *Server) Serving() bool { return s.term != nil && s.gate.Open() }

// sweep drops expired counters when requests are too rare to: an
// Increment of nothing sweeps and changes nothing else.
func (s *Server) sweep() {
	_, _ = s.store.Increment(context.Background(), s.opts.Now(), nil)
}

// Increment implements envoyrl.Store for a front end in the same process:
// it counts as a request over NATS would, or fails with ErrNotServing
// when the server may not answer.
func (s *Server) Increment(ctx context.Context, now time.Time, incs []envoyrl.Increment) ([]uint64, error) {
	if !s.Serving() {
		return nil, ErrNotServing
	}
	s.local.Add(1)
	return s.count(ctx, now, incs)
}

// Get implements envoyrl.Store; see Increment.
func (s *Server) Get(ctx context.Context, now time.Time, incs []envoyrl.Increment) ([]uint64, error) {
	if !s.Serving() {
		return nil, ErrNotServing
	}
	s.local.Add(1)
	return s.store.Get(ctx, now, incs)
}

// count adds incs to the store, each kept until its window's end plus
// the clock skew, and keeps the counts.
func (s *Server) count(ctx context.Context, now time.Time, incs []envoyrl.Increment) ([]uint64, error) {
	if s.opts.ClockSkew > 0 {
		skewed := make([]envoyrl.Increment, len(incs))
		for i, inc := range incs {
			inc.Expires = inc.Expires.Add(s.opts.ClockSkew)
			skewed[i] = inc
		}
		incs = skewed
	}
	vals, err := s.store.Increment(ctx, now, incs)
	switch {
	case errors.Is(err, envoyrl.ErrStoreFull):
		s.full.Add(1)
		return nil, &CountError{Code: envoywire.CodeTooMany, Msg: fmt.Sprintf("partition %d keeps its most counters (%d); retry once windows end", s.opts.Partition, s.opts.MaxCounters)}
	case err != nil:
		s.overflows.Add(1)
		return nil, &CountError{Code: envoywire.CodeConflict, Msg: err.Error()}
	}
	for _, inc := range incs {
		s.hits.Add(inc.Hits)
	}
	return vals, nil
}

// handle serves allot.<node>.envoy.p.<i>.count.<token> and, with one
// partition, allot.<node>.envoy.count.<token>.
func (s *Server) handle(m micro.Request) {
	s.requests.Add(1)
	enc := wire.EncodingOf(m.Headers())
	subj := m.Subject()
	i := strings.LastIndexByte(subj, '.')
	if i < 0 || !strings.HasSuffix(subj[:i], ".count") {
		s.replyError(m, enc, reply.CodeUnknownEndpoint, fmt.Sprintf("unknown envoy subject %q: want allot.%s.envoy.count.<domain token>", subj, s.opts.Node))
		return
	}
	var req allotpb.EnvoyCountRequest
	if err := envoywire.Decode(enc, m.Data(), subj[i+1:], &req); err != nil {
		code := envoywire.CodeBadRequest
		if errors.Is(err, wire.ErrTooLarge) {
			code = envoywire.CodeTooLarge
		}
		s.replyError(m, enc, code, "envoy count: "+strings.TrimPrefix(err.Error(), envoywire.ErrBadRequest.Error()+": "))
		return
	}
	incs := make([]envoyrl.Increment, len(req.GetCounters()))
	for j, c := range req.GetCounters() {
		incs[j] = envoyrl.Increment{Key: c.GetKey(), Hits: c.GetHits(), Expires: time.Unix(c.GetExpires(), 0), Domain: req.GetDomain()}
	}
	now := s.opts.Now()
	var vals []uint64
	var err error
	if req.GetReadOnly() {
		vals, err = s.store.Get(context.Background(), now, incs)
	} else {
		vals, err = s.count(context.Background(), now, incs)
	}
	var ce *CountError
	if errors.As(err, &ce) {
		s.replyError(m, enc, ce.Code, "envoy count: "+ce.Msg)
		return
	}
	data, err := wire.Marshal(enc, &allotpb.EnvoyCountResponse{Values: vals})
	if err != nil {
		s.replyError(m, enc, reply.CodeInternal, "envoy count: encoding the reply: "+err.Error())
		return
	}
	if !s.gate.Open() {
		s.gate.Silenced.Add(1)
		return
	}
	var hdr micro.Headers
	if enc == wire.JSON {
		hdr = micro.Headers{wire.HeaderContentType: {wire.ContentJSON}}
	}
	if err := m.Respond(data, micro.WithHeaders(hdr)); err != nil && !errors.Is(err, micro.ErrRespond) {
		s.log.Debug("envoy count: reply failed", "err", err)
	}
}

// replyError answers m with an error unless the server may no longer
// answer.
func (s *Server) replyError(m micro.Request, enc wire.Encoding, code int, text string) {
	if !s.gate.Open() {
		s.gate.Silenced.Add(1)
		return
	}
	if err := reply.Error(m, enc, code, text); err != nil {
		s.log.Debug("envoy count: error reply failed", "err", err)
	}
}

// CountError is a count the partition refused; Code is its
// Nats-Service-Error-Code (envoywire's codes).
type CountError struct {
	Code int
	Msg  string
}

// Error implements error.
func (e *CountError) Error() string { return fmt.Sprintf("envoy count error %d: %s", e.Code, e.Msg) }

// Stats is the "data" of the envoy service's micro STATS: one partition's
// serving leader (status.Envoy).
type Stats = status.Envoy

// Stats returns the server's counters; safe for concurrent use.
func (s *Server) Stats() Stats {
	st := Stats{PartitionLeader: s.gate.PartitionStatus(s.opts.Node, s.opts.ServerID, s.opts.Partition, s.opts.Partitions, s.opts.Term), Counters: s.store.Len(), MaxCounters: s.opts.MaxCounters,
		Requests: s.requests.Load(), Local: s.local.Load(), Hits: s.hits.Load(), Full: s.full.Load(), Overflows: s.overflows.Load(),
		Silenced: s.gate.Silenced.Load()}
	return st
}
