// Package rlqsserver serves Envoy's rate limit quota service,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService (Envoy's
// rate_limit_quota filter), from allot's allocation rounds.
//
// Each Envoy keeps one stream open and reports, per bucket, the requests
// it allowed and denied. Every stream is a lease claimant of the
// coordinator, over NATS like an agent: each bucket whose lease resource
// (rlqs/<domain>/<key>=<value>/..., internal/rlqs.Resource) a template
// with an rlqs/ glob matches claims a share of that resource, with wants
// measured from the reports, and Envoy is told to enforce the share as a
// token bucket for as long as the lease lasts. So what every Envoy
// enforces adds up to at most the resource's capacity, and no request
// waits for allot. A bucket no such template names gets no assignment
// (Envoy's no_assignment_behavior applies); one that reports no requests
// for a while is abandoned.
package rlqsserver

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/rlqs"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
)

// Defaults of Options.
const (
	// DefaultRequestTimeout bounds a GetCapacity request.
	DefaultRequestTimeout = 2 * time.Second
	// DefaultMaxBuckets bounds the buckets of one stream.
	DefaultMaxBuckets = wire.MaxResourcesPerReq
)

// Options configure a Service.
type Options struct {
	// Node is the tree node whose coordinator leases. Default "root".
	Node string
	// ClientPrefix starts every stream's client id at the coordinator
	// ("<prefix>:<n>"). Default rlqs:<host>:<pid>:<random>.
	ClientPrefix string
	// Templates returns the templates in force (a watcher's Current):
	// they say which buckets allot governs. Required.
	Templates func() *config.Set
	// Buckets tune demand and abandonment.
	Buckets rlqs.Options
	// RequestTimeout bounds a GetCapacity request. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxBuckets bounds the buckets of one stream; more get no
	// assignment. Default DefaultMaxBuckets.
	MaxBuckets int
	// Logger receives the service's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Service answers StreamRateLimitQuotas. Register it on a grpc.Server.
type Service struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	nc   *nats.Conn
	opts Options
	log  *slog.Logger
	seq  atomic.Uint64

	streams, open, assignments, abandons atomic.Uint64
}

// New validates opts and returns a Service claiming over nc.
func New(nc *nats.Conn, opts Options) (*Service, error) {
	if nc == nil {
		return nil, errors.New("rlqsserver: nil NATS connection")
	}
	if opts.Templates == nil {
		return nil, errors.New("rlqsserver: Options.Templates is required")
	}
	if opts.Node == "" {
		opts.Node = "root"
	}
	if err := subjects.ValidateNode(opts.Node); err != nil {
		return nil, fmt.Errorf("rlqsserver: %w", err)
	}
	if opts.ClientPrefix == "" {
		host, _ := os.Hostname()
		opts.ClientPrefix = fmt.Sprintf("rlqs:%s:%d:%x", strings.ReplaceAll(host, " ", "_"), os.Getpid(), rand.Uint32())
	}
	if err := wire.ValidateID("client id prefix", opts.ClientPrefix); err != nil || len(opts.ClientPrefix) > wire.MaxIDLen-21 {
		return nil, fmt.Errorf("rlqsserver: client prefix %q: not a valid client id, or too long", opts.ClientPrefix)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MaxBuckets <= 0 {
		opts.MaxBuckets = DefaultMaxBuckets
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Service{nc: nc, opts: opts, log: opts.Logger}, nil
}

// Register registers the service on g.
func (s *Service) Register(g *grpc.Server) { rlqspb.RegisterRateLimitQuotaServiceServer(g, s) }

// StreamRateLimitQuotas implements rlqspb.RateLimitQuotaServiceServer:
// one Envoy's stream, a claimant of its own for as long as it lasts. When
// it ends its leases are not given back: Envoy may enforce its last
// assignments until they expire, and the coordinator counts them until
// then.
func (s *Service) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	first, err := stream.Recv()
	if err != nil {
		return endOf(err)
	}
	if first.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "the first usage report of a stream must name the domain")
	}
	s.streams.Add(1)
	s.open.Add(1)
	defer s.open.Add(^uint64(0))
	c := newClaimant(s, first.GetDomain(), s.opts.ClientPrefix+":"+strconv.FormatUint(s.seq.Add(1), 10), stream)
	return c.run(stream.Context(), first)
}

// endOf is the outcome of a stream that ended with err: a clean end when
// Envoy closed it.
func endOf(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// Stats counts the service's streams and actions.
type Stats struct {
	// Streams counts streams opened, Open those open now.
	Streams uint64 `json:"streams"`
	Open    uint64 `json:"open"`
	// Assignments and Abandons count the bucket actions sent.
	Assignments uint64 `json:"assignments"`
	Abandons    uint64 `json:"abandons"`
}

// Stats returns the service's counts.
func (s *Service) Stats() Stats {
	return Stats{Streams: s.streams.Load(), Open: s.open.Load(), Assignments: s.assignments.Load(), Abandons: s.abandons.Load()}
}
