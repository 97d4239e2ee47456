// Package rls serves Envoy's global rate limit API,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over gRPC
// with go-control-plane's generated types, deciding as envoyproxy/ratelimit
// does (internal/envoyrl) with envoyproxy/ratelimit's configuration, kept
// in allot's configuration bucket under envoy.<domain>.
//
// The Service decides; where its window counters live is its Store's
// business. `allot up|coordinator --rls-addr` count in the quota
// partitions' leaders (envoyserver.Router); `allot agent --rls-addr`, a
// sidecar beside Envoy, answers descriptors mapped to lease resources
// from its leases, in process, and counts the others in the partitions
// (LeaseStore).
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/envoywire"
)

// Options configure a Service.
type Options struct {
	// Config returns the configuration in force. It is called on every
	// request, so it must be cheap (an atomic load), and return the same
	// pointer until the configuration changes. Required.
	Config func() *envoyrl.Config
	// Store keeps the window counters. Required.
	Store envoyrl.Store
	// Decide are the settings of the decisions (the reference's
	// SHADOW_MODE, QUOTA_MODE, response headers, ...).
	Decide envoyrl.Options
	// Logger receives the service's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Service answers ShouldRateLimit. Register it on a grpc.Server. Safe for
// concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	opts Options
	log  *slog.Logger
	// lim is the Limiter of the configuration last seen.
	lim atomic.Pointer[limiterOf]

	requests, overLimit, failures atomic.Uint64
}

type limiterOf struct {
	cfg *envoyrl.Config
	lim *envoyrl.Limiter
}

// New validates opts and returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Config == nil {
		return nil, errors.New("rls: Options.Config is required")
	}
	if opts.Store == nil {
		return nil, errors.New("rls: Options.Store is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Service{opts: opts, log: opts.Logger}, nil
}

// Register registers the service on g.
func (s *Service) Register(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, s) }

// limiter returns the Limiter of the configuration in force.
func (s *Service) limiter() *envoyrl.Limiter {
	cfg := s.opts.Config()
	if p := s.lim.Load(); p != nil && p.cfg == cfg {
		return p.lim
	}
	p := &limiterOf{cfg: cfg, lim: envoyrl.NewLimiter(cfg, s.opts.Store, s.opts.Decide)}
	s.lim.Store(p)
	return p.lim
}

// ShouldRateLimit implements rlspb.RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	s.requests.Add(1)
	resp, err := s.limiter().ShouldRateLimit(ctx, s.opts.Now(), req)
	if err != nil {
		s.failures.Add(1)
		return nil, grpcError(err)
	}
	if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
		s.overLimit.Add(1)
	}
	return resp, nil
}

// grpcError gives err the gRPC code that says whose fault it is: the
// request's (InvalidArgument), the counters' bound (ResourceExhausted), or
// the service's (Unavailable: no partition leader, a time-out). Envoy
// treats every error alike (its failure_mode_deny decides); the reference
// answers Unknown with the same messages.
func grpcError(err error) error {
	var re *envoyrl.RequestError
	var ce *envoyserver.CountError
	switch {
	case errors.As(err, &re):
		return status.Error(codes.InvalidArgument, re.Msg)
	case errors.As(err, &ce) && ce.Code == envoywire.CodeTooMany:
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.As(err, &ce) && ce.Code == envoywire.CodeConflict:
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("counting hits: %v", err))
}

// Stats counts the service's requests.
type Stats struct {
	// Requests counts ShouldRateLimit calls, OverLimit those answered
	// OVER_LIMIT overall, Failures those answered with an error.
	Requests  uint64 `json:"requests"`
	OverLimit uint64 `json:"over_limit"`
	Failures  uint64 `json:"failures"`
}

// Stats returns the service's counts.
func (s *Service) Stats() Stats {
	return Stats{Requests: s.requests.Load(), OverLimit: s.overLimit.Load(), Failures: s.failures.Load()}
}

// WatchedConfig adapts a configuration watcher to Options.Config: the
// Envoy configuration of the watcher's current Set (the same pointer for
// as long as the Set is the same).
func WatchedConfig(w *configkv.Watcher) func() *envoyrl.Config {
	return func() *envoyrl.Config { return w.Current().Envoy() }
}
