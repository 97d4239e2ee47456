package main

// Envoy's rate limit API in `allot up` and `allot coordinator`: the
// counter partitions beside the quota partitions, and the gRPC front end
// (--rls-addr). See docs/envoy.md.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/spf13/pflag"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/rlqsserver"
	"github.com/allot/allot/internal/rls"
)

// rlsFlags configure Envoy's rate limit API: the gRPC front end and how
// it decides. `allot up`, `allot coordinator` and `allot agent` share them.
type rlsFlags struct {
	addr    string
	headers string
	// quotaMode and stopIncrement mirror the reference's QUOTA_MODE and
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; its SHADOW_MODE is --shadow.
	quotaMode     bool
	stopIncrement bool
	// maxCounters bounds each partition's counters (up, coordinator).
	maxCounters int
	// announce, if set, is told the address the front end listens on.
	announce func(addr string)
}

func (f *rlsFlags) register(fs *pflag.FlagSet, partitions bool) {
	fs.StringVar(&f.addr, "rls-addr", "", "HOST:PORT to serve Envoy's rate limit APIs on over gRPC: envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit, configured by the envoy.<domain> keys) and envoy.service.rate_limit_quota.v3.RateLimitQuotaService (RLQS); empty: none (docs/envoy.md)")
	fs.StringVar(&f.headers, "rls-headers", "none", "ShouldRateLimit: add rate limit headers to responses: 'none', 'ratelimit' (RateLimit-Limit, -Remaining, -Reset, the reference's default names) or 'x-ratelimit' (x-ratelimit-limit, ...)")
	fs.BoolVar(&f.quotaMode, "rls-quota-mode", false, "ShouldRateLimit: answer every exceeded limit OK, as if each had quota_mode (the reference's QUOTA_MODE); --shadow is its SHADOW_MODE")
	fs.BoolVar(&f.stopIncrement, "rls-stop-increment-over-limit", false, "ShouldRateLimit: when a descriptor would exceed its limit, count only the descriptors that would (the reference's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)")
	if partitions {
		fs.IntVar(&f.maxCounters, "rls-max-counters", envoyserver.DefaultMaxCounters, "most Envoy rate limit window counters each partition keeps; requests adding more are refused until windows end (0: the default)")
	}
}

// validate checks the flags.
func (f *rlsFlags) validate() error {
	if _, err := f.decide(false); err != nil {
		return err
	}
	if f.maxCounters < 0 {
		return fmt.Errorf("--rls-max-counters %d is negative", f.maxCounters)
	}
	return nil
}

// decide returns the decision settings; shadow is --shadow.
func (f *rlsFlags) decide(shadow bool) (envoyrl.Options, error) {
	o := envoyrl.Options{GlobalShadowMode: shadow, GlobalQuotaMode: f.quotaMode, StopIncrementWhenOverLimit: f.stopIncrement}
	switch f.headers {
	case "none", "":
	case "ratelimit":
		o.Headers = envoyrl.DefaultHeaderNames()
	case "x-ratelimit":
		o.Headers = envoyrl.XRateLimitHeaderNames()
	default:
		return o, fmt.Errorf("--rls-headers %q: want none, ratelimit or x-ratelimit", f.headers)
	}
	return o, nil
}

// envoyPartitions are the Envoy counter partitions this process
// campaigns for, by partition.
type envoyPartitions struct {
	mu       sync.Mutex
	replicas map[int]*envoyserver.Replica
}

// local returns this process's serving leader of partition p, or nil.
func (e *envoyPartitions) local(p int) *envoyserver.Server {
	e.mu.Lock()
	r := e.replicas[p]
	e.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.Server()
}

// add makes the replica of partition p; run it.
func (e *envoyPartitions) add(nc *nats.Conn, cf *coordFlags, serverID string, p int, log *slog.Logger) (*envoyserver.Replica, error) {
	r, err := envoyserver.NewReplica(nc, envoyserver.ReplicaOptions{
		Options: envoyserver.Options{Node: cf.node, ServerID: serverID, Partition: p, Partitions: cf.quotaParts,
			MaxCounters: cf.rls.maxCounters, ClockSkew: skewOption(cf.clockSkew), Logger: log},
		Election: cf.election(nil),
	})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.replicas == nil {
		e.replicas = map[int]*envoyserver.Replica{}
	}
	e.replicas[p] = r
	e.mu.Unlock()
	return r, nil
}

// centralRLS returns the run of the gRPC front end of `allot up` and
// `allot coordinator` (nil without --rls-addr): ShouldRateLimit decided
// by the configuration w watches, counted in the partitions (in process
// beside their leaders here), and RLQS streams claiming leases of the
// node's coordinator.
func centralRLS(nc *nats.Conn, cf *coordFlags, w *configkv.Watcher, parts *envoyPartitions, log *slog.Logger) (func(context.Context) error, error) {
	if cf.rls.addr == "" {
		return nil, nil
	}
	decide, err := cf.rls.decide(cf.shadow)
	if err != nil {
		return nil, err
	}
	router, err := envoyserver.NewRouter(nc, envoyserver.RouterOptions{Node: cf.node, Partitions: cf.quotaParts, Local: parts.local})
	if err != nil {
		return nil, err
	}
	svc, err := rls.New(rls.Options{Config: rls.WatchedConfig(w), Store: router, Decide: decide, Logger: log})
	if err != nil {
		return nil, err
	}
	srv, err := rls.Listen(cf.rls.addr, log)
	if err != nil {
		return nil, err
	}
	svc.Register(srv.GRPC())
	quotas, err := rlqsserver.New(nc, rlqsserver.Options{Node: cf.node, Templates: w.Current, Logger: log})
	if err != nil {
		return nil, err
	}
	quotas.Register(srv.GRPC())
	addr := srv.Addr().String()
	log.Info("serving Envoy's rate limit service (gRPC)", "addr", addr, "headers", cf.rls.headers, "shadow", cf.shadow, "quota_mode", cf.rls.quotaMode)
	if cf.rls.announce != nil {
		cf.rls.announce(addr)
	}
	return srv.Serve, nil
}
