package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spf13/pflag"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/heapfloor"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/metrics"
	"github.com/allot/allot/quotaserver"
	"github.com/allot/allot/replica"
)

// coordFlags are the flags shared by `allot up` and `allot coordinator`.
type coordFlags struct {
	node         string
	parent       string
	serverID     string
	round        time.Duration
	bucket       string
	configBucket string
	unmatched    config.UnmatchedPolicy
	shadow       bool
	logLevel     string
	logFormat    string
	electionTTL  time.Duration
	replicasKV   int
	clockSkew    time.Duration
	maxClients   int
	maxRes       int
	isolation    isolationFlags
	// intake bounds every service's intake: --max-in-flight,
	// --tenant-rate, --tenant-burst.
	intake intake.Limits
	// quotaParts is how many partitions share the quota namespaces;
	// quotaServe which of them this process serves.
	quotaParts int
	quotaServe partitionList
	// leaseParts is how many lease partitions share the node's
	// resources; leaseServe which of them this process campaigns for.
	leaseParts int
	leaseServe partitionList
	// holdTTL is how long a domain hold lives without a refresh.
	holdTTL time.Duration
	// onServing, if set, is called when a replica of lease partition
	// partition starts or stops serving.
	onServing func(partition int, term uint64, serving bool)
	// metricsAddr serves /metrics, /healthz and /readyz ("" none); see
	// ops.go. Set before register to change the flag's default.
	metricsAddr string
	// ops, if set, is told of the replicas serve runs.
	ops *opsState
	// metricsMax bounds the resources metrics name per node.
	metricsMax int
	// dashboard guards the dashboard served with --metrics-addr.
	dashboard dashboardFlags
	// rls configures Envoy's rate limit API (rls.go).
	rls rlsFlags
	// heapFloor is --heap-floor as given; heapFloorBytes as validated.
	heapFloor      string
	heapFloorBytes uint64
}

func (f *coordFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.node, "node", coordinator.DefaultNode, "tree node to serve; names the subjects allot.<node>.*")
	fs.StringVar(&f.parent, "parent-node", "", "parent node (toward the root) this node gets its capacity from over its subjects allot.<parent>.*; its configuration bucket becomes a mirror of the parent's, in JetStream domain <parent>")
	fs.StringVar(&f.serverID, "server-id", "", "this replica's id (default host:pid)")
	fs.DurationVar(&f.round, "round", coordinator.DefaultRoundInterval, "allocation round interval: requests arriving during one are answered together at its end (0 answers each request at once, with whatever queued meanwhile; at most 50ms)")
	fs.StringVar(&f.bucket, "state-bucket", coordinator.DefaultStateBucket, "KV bucket for coordinator state (lease horizons)")
	fs.StringVar(&f.configBucket, "config-bucket", configkv.DefaultBucket, "KV bucket holding resource templates")
	f.unmatched = config.UnmatchedDefault
	fs.Var(goFlag(&f.unmatched, "POLICY"), "unmatched", "what to do with resources no template matches: 'default' (serve with the built-in default template) or 'reject' (answer 404; up then does not seed the catch-all example template)")
	fs.BoolVar(&f.shadow, "shadow", false, "shadow mode for every resource and quota bucket: allocate and report leases as usual, but tell agents to admit what they want and count what the grant would have refused; answer every quota take OK and count what the bucket would have refused")
	fs.DurationVar(&f.clockSkew, "clock-skew", coordinator.DefaultClockSkew, "most the clocks of this node's replicas may differ by; lease times from a predecessor are trusted only with this margin")
	fs.IntVar(&f.maxRes, "max-resources", coordinator.DefaultMaxResources, "most resources a node keeps state for; requests naming more new ones get error 429")
	fs.IntVar(&f.maxClients, "max-clients", coordinator.DefaultMaxClients, "most client records (one per client and resource) a node keeps; requests adding more get error 429")
	f.isolation.register(fs)
	fs.IntVar(&f.intake.MaxInFlight, "max-in-flight", intake.DefaultMaxInFlight, "most requests each service (coordinator, quota partition, domain partition) holds taken up and not yet answered; past it a request gets 503 with a retry_after at once, a quarter kept for the refreshes of clients holding leases (0: the default)")
	fs.Float64Var(&f.intake.TenantRate, "tenant-rate", DefaultTenantRate, "requests per second each tenant may send each service on its tenant subjects (0: no limit); past it 429 with a retry_after, so one tenant's flood cannot starve another")
	fs.IntVar(&f.intake.TenantBurst, "tenant-burst", 0, "burst of --tenant-rate (0: twice the rate)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json (one JSON object a line)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", f.metricsAddr, "HOST:PORT to serve Prometheus /metrics, /healthz and /readyz on over HTTP (empty: none; see docs/metrics.md)")
	f.dashboard.register(fs)
	fs.IntVar(&f.metricsMax, "metrics-max-resources", metrics.DefaultMaxResources, fmt.Sprintf("most resources per node that metrics name (those with the most outstanding; the others are summed as resource=%q), 1-%d", metrics.OtherResource, coordinator.MaxObservedResources))
	fs.DurationVar(&f.electionTTL, "election-ttl", election.DefaultTTL, fmt.Sprintf("leader key TTL in bucket %s (whole seconds; default %v, or %v with --bucket-replicas above 1, so that a leader outlasts the election stream's own leader election when a NATS server is lost); an abrupt leader loss costs about TTL+1s; 0: the default", election.DefaultBucket, election.DefaultTTL, election.ReplicatedTTL))
	fs.IntVar(&f.replicasKV, "bucket-replicas", 1, "replicas of the configuration, election and state buckets when allot creates them (3 on a three-server cluster; 0: 1)")
	fs.IntVar(&f.quotaParts, "quota-partitions", 1, "quota partitions sharing the namespaces (allot.<node>.quota.*), each electing its own leader; above 1 the NATS server needs the subject mapping of deploy/nats/quota/partitions.conf (allot up sets it)")
	f.quotaServe = partitionList{all: true}
	fs.DurationVar(&f.holdTTL, "hold-ttl", domainserver.DefaultHoldTTL, "domain limits: how long a hold of a copy-limited resource lives without its client's refresh (agents refresh every third of it); a crashed client's holds are released after it, and a new leader learns the live holds for as long before it grants more (0: the default)")
	fs.Var(goFlag(&f.quotaServe, "PARTITIONS"), "quota-serve", "quota partitions this process serves: 'all', 'none', or a comma-separated list such as 0,2")
	fs.IntVar(&f.leaseParts, "lease-partitions", 1, fmt.Sprintf("lease partitions sharing the node's resources (at most %d), each electing its own coordinator and serving allot.<node>.capacity.p.<i>.* for the resources it owns (subjects.md, \"Lease partitions\"); partition 0 also serves the plain subjects, relaying each part to its owner", subjects.MaxLeasePartitions))
	f.leaseServe = partitionList{all: true}
	fs.Var(goFlag(&f.leaseServe, "PARTITIONS"), "lease-serve", "lease partitions this process campaigns for: 'all', 'none', or a comma-separated list such as 0,2")
	f.rls.register(fs, true)
	fs.StringVar(&f.heapFloor, "heap-floor", heapfloor.Default, "heap the Go garbage collector lets grow before it collects, while less is live: a higher GOGC for a small heap, so that a busy server with few leases does not collect many times a second (about a sixth less CPU per request; the process then takes up to this much more memory). GOGC and GOMEMLIMIT still apply; 0: Go's own pacing")
}

// partitionList is the value of --quota-serve.
type partitionList struct {
	all bool
	ids []int
}

func (p *partitionList) String() string {
	switch {
	case p == nil || p.all:
		return "all"
	case len(p.ids) == 0:
		return "none"
	}
	out := make([]string, len(p.ids))
	for i, id := range p.ids {
		out[i] = strconv.Itoa(id)
	}
	return strings.Join(out, ",")
}

func (p *partitionList) Set(v string) error {
	switch v = strings.TrimSpace(v); v {
	case "all":
		*p = partitionList{all: true}
		return nil
	case "none", "":
		*p = partitionList{}
		return nil
	}
	var ids []int
	for f := range strings.SplitSeq(v, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return fmt.Errorf("%q: want 'all', 'none' or partition numbers like 0,2", v)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	*p = partitionList{ids: ids}
	return nil
}

// leasePartitions returns the node's lease partitions and those this
// process serves. Flags left unset (coordFlags made without register)
// mean the defaults: one partition, served.
func (f *coordFlags) leasePartitions() (n int, serve []int, err error) {
	if f.leaseParts == 0 {
		return 1, []int{0}, nil
	}
	serve, err = f.leaseServe.of(f.leaseParts, "lease")
	return f.leaseParts, serve, err
}

// partitions returns the quota partitions to serve out of n.
func (p *partitionList) partitions(n int) ([]int, error) { return p.of(n, "quota") }

// of returns the partitions of service ("quota", "lease") to serve out of
// n; its flags are --<service>-serve and --<service>-partitions.
func (p *partitionList) of(n int, service string) ([]int, error) {
	if p.all {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	for _, id := range p.ids {
		if id >= n {
			return nil, fmt.Errorf("--%s-serve %d: there are only %d partitions (0 to %d; see --%s-partitions)", service, id, n, n-1, service)
		}
	}
	return p.ids, nil
}

func (f *coordFlags) options(log *slog.Logger) coordinator.Options {
	round := f.round
	if round == 0 {
		round = coordinator.NoRoundInterval
	}
	o := coordinator.Options{Node: f.node, Parent: f.parent, ServerID: f.serverID, RoundInterval: round, StateBucket: f.bucket, ClockSkew: skewOption(f.clockSkew), MaxResources: f.maxRes, MaxClients: f.maxClients, Shadow: f.shadow, Intake: f.intake, Logger: log}
	f.isolation.apply(&o)
	return o
}

// DefaultTenantRate is --tenant-rate's default: a tenant's requests per
// second to each service, well below what one coordinator answers (tens
// of thousands a second) so that several tenants' floods still leave
// room for the others.
const DefaultTenantRate = 1000

// skewOption maps --clock-skew 0 (replicas on one host) to the option's
// explicit zero: NoClockSkew, -1 for the coordinator and the Envoy
// partitions alike.
func skewOption(d time.Duration) time.Duration {
	if d == 0 {
		return coordinator.NoClockSkew
	}
	return d
}

// election is the election of a replica of this process, told of its
// serving with onServing (nil: nobody).
func (f *coordFlags) election(onServing func(term uint64, serving bool)) replica.Election {
	return replica.Election{TTL: f.electionTTL, Replicas: f.replicasKV, OnServing: onServing}
}

// settle fills the defaults that depend on other flags, once fs is
// parsed: without --election-ttl, a level whose buckets are replicated
// gets election.ReplicatedTTL.
func (f *coordFlags) settle(fs *pflag.FlagSet) {
	if !fs.Changed("election-ttl") && f.replicasKV > 1 {
		f.electionTTL = election.ReplicatedTTL
	}
}

// warnShortTTL says when an election TTL given with replicated buckets
// cannot outlast the election stream's own leader election.
func (f *coordFlags) warnShortTTL(log *slog.Logger) {
	if f.replicasKV > 1 && f.electionTTL < election.ReplicatedTTL {
		log.Warn("the election TTL is shorter than a replicated election stream needs: losing the NATS server that leads it stops the node for up to about 9s", "election_ttl", f.electionTTL, "bucket_replicas", f.replicasKV, "recommended", election.ReplicatedTTL)
	}
}

// validate checks the tree flags, the node's limits and
// --metrics-max-resources.
func (f *coordFlags) validate() error {
	// Each flag by name first: the intake's own error shows every limit.
	if r := f.intake.TenantRate; !(r >= 0) || math.IsInf(r, 1) {
		return fmt.Errorf("--tenant-rate %v: want a number of requests per second, 0 (no limit) or more", r)
	}
	if f.intake.TenantBurst < 0 {
		return fmt.Errorf("--tenant-burst %d: want 0 (twice the rate) or more", f.intake.TenantBurst)
	}
	if f.intake.MaxInFlight < 0 {
		return fmt.Errorf("--max-in-flight %d: want 0 (the default, %d) or more", f.intake.MaxInFlight, intake.DefaultMaxInFlight)
	}
	if err := f.intake.Validate(); err != nil {
		return fmt.Errorf("--max-in-flight, --tenant-rate, --tenant-burst: %w", err)
	}
	// The id goes into lease records, election values and logs, and names
	// the replica to operators: an id as clients' ids are.
	if f.serverID != "" {
		if err := wire.ValidateID("--server-id", f.serverID); err != nil {
			return err
		}
	}
	// The coordinator takes a negative interval for an explicit 0; from
	// the command line it is a mistake, refused before connecting.
	if f.round < 0 || f.round > coordinator.MaxRoundInterval {
		return fmt.Errorf("--round %v: want 0 (each request at once) to %v", f.round, coordinator.MaxRoundInterval)
	}
	if f.metricsMax < 1 || f.metricsMax > coordinator.MaxObservedResources {
		return fmt.Errorf("--metrics-max-resources %d: want 1-%d", f.metricsMax, coordinator.MaxObservedResources)
	}
	if f.maxRes < 1 || f.maxClients < 1 {
		return fmt.Errorf("--max-resources %d, --max-clients %d: want positive numbers", f.maxRes, f.maxClients)
	}
	if err := subjects.ValidateNode(f.node); err != nil {
		return fmt.Errorf("--node %q: %w", f.node, err)
	}
	if f.quotaParts < 1 || f.quotaParts > quotaserver.MaxPartitions {
		return fmt.Errorf("--quota-partitions %d: want 1 to %d", f.quotaParts, quotaserver.MaxPartitions)
	}
	if _, err := f.quotaServe.partitions(f.quotaParts); err != nil {
		return err
	}
	if f.leaseParts < 1 || f.leaseParts > subjects.MaxLeasePartitions {
		return fmt.Errorf("--lease-partitions %d: want 1 to %d", f.leaseParts, subjects.MaxLeasePartitions)
	}
	if _, err := f.leaseServe.of(f.leaseParts, "lease"); err != nil {
		return err
	}
	if err := f.isolation.validate(f); err != nil {
		return err
	}
	if err := f.dashboard.resolve(); err != nil {
		return err
	}
	if err := f.rls.validate(); err != nil {
		return err
	}
	n, err := heapfloor.ParseSize(f.heapFloor)
	if err != nil {
		return fmt.Errorf("--heap-floor: %w", err)
	}
	f.heapFloorBytes = n
	if f.parent == "" {
		return nil
	}
	if err := subjects.ValidateNode(f.parent); err != nil {
		return fmt.Errorf("--parent-node %q: %w", f.parent, err)
	}
	if f.parent == f.node {
		return fmt.Errorf("--parent-node %q is the node itself: a node's parent is the level above it", f.parent)
	}
	return nil
}

func (f *coordFlags) logger(env *cliEnv) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	h, err := logHandler(env, f.logFormat, lvl)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

// startTemplates opens (creating if needed) the configuration bucket and
// starts watching it; the watch resyncs on every NATS reconnect. Under a
// parent the bucket is a mirror of the parent's, so templates come from
// the root and the last ones received keep serving while the link is cut.
func startTemplates(ctx context.Context, nc *nats.Conn, cf *coordFlags, log *slog.Logger) (*configkv.Watcher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	var kv jetstream.KeyValue
	if cf.parent != "" {
		kv, err = openMirror(ctx, js, cf, log)
	} else {
		kv, err = configkv.OpenBucket(ctx, js, cf.configBucket, true, configkv.Replicas(cf.replicasKV))
	}
	if err != nil {
		return nil, err
	}
	// Its verdict on every key, for operators with only the nats CLI.
	verdicts := func(w *configkv.Watcher) { w.PublishVerdicts(js, cf.bucket, cf.node) }
	w, err := startWatcher(ctx, nc, kv, cf.unmatched.Fallback(), log, verdicts)
	if err == nil && cf.unmatched == config.UnmatchedReject {
		warnCatchAll(w.Current(), log)
	}
	return w, err
}

// startWatcher watches kv, and resyncs the watch on every reconnect of
// nc. setup, when not nil, configures the watcher before it starts.
func startWatcher(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, fallback *config.Template, log *slog.Logger, setup func(*configkv.Watcher)) (*configkv.Watcher, error) {
	w := configkv.NewWatcher(kv, fallback, log)
	if setup != nil {
		setup(w)
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	prev := nc.Opts.ReconnectedCB
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		w.Resync()
	})
	return w, nil
}

// warnCatchAll warns of the templates of set that match every resource:
// while one exists, --unmatched reject refuses nothing.
func warnCatchAll(set *config.Set, log *slog.Logger) {
	for _, t := range set.Templates() {
		if t.Glob == "*" {
			log.Warn("a stored template matches every resource, so --unmatched reject has no effect while it exists",
				"template", t.Name, "remove it with", "allot config delete "+t.Name)
		}
	}
}

// mirrorSyncWait bounds how long a coordinator under a parent waits for its
// configuration mirror to catch up before it serves.
const mirrorSyncWait = 5 * time.Second

// openMirror opens the configuration mirror of a level under a parent
// and waits a while for it to catch up, so that the level starts with the
// root's templates; if the parent cannot be reached it serves what the
// mirror holds (after a cut: the last templates received).
func openMirror(ctx context.Context, js jetstream.JetStream, cf *coordFlags, log *slog.Logger) (jetstream.KeyValue, error) {
	kv, err := configkv.OpenMirror(ctx, js, cf.configBucket, cf.parent, configkv.Replicas(cf.replicasKV))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, mirrorSyncWait)
	defer cancel()
	if err := configkv.WaitMirrorSynced(wctx, kv); err != nil {
		log.Warn("configuration mirror not in sync with the parent's yet; serving the templates it holds until it is", "bucket", cf.configBucket, "parent", cf.parent, "err", err)
	} else {
		log.Info("configuration mirror in sync with the parent's", "bucket", cf.configBucket, "parent", cf.parent)
	}
	return kv, nil
}

// serve runs a coordinator on nc, with templates from the configuration
// bucket, until ctx ends; then it drains it.
func serve(ctx context.Context, nc *nats.Conn, cf *coordFlags, log *slog.Logger) error {
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := startTemplates(startCtx, nc, cf, log)
	if err != nil {
		return err
	}
	defer w.Stop()
	opts := cf.options(log)
	opts.Templates = sources.WatchedTemplates(w)
	if cf.shadow {
		log.Info("shadow mode: leases are allocated and reported but agents admit what they want, and quota takes are answered OK; both count what would have been refused")
	}
	// A replica per lease partition served: it serves only while it
	// leads its partition's election, and resigns when ctx ends so that
	// another replica takes over at once.
	leaseN, leaseParts, err := cf.leasePartitions()
	if err != nil {
		return err
	}
	var runs []func(context.Context) error
	for _, p := range leaseParts {
		o := opts
		o.Partition, o.Partitions = p, leaseN
		var onServing func(uint64, bool)
		if cf.onServing != nil {
			onServing = func(term uint64, serving bool) { cf.onServing(p, term, serving) }
		}
		rep, err := coordinator.NewReplica(nc, coordinator.ReplicaOptions{Options: o, Election: cf.election(onServing)})
		if err != nil {
			return err
		}
		if cf.ops != nil {
			defer cf.ops.add(nc, rep)()
		}
		runs = append(runs, rep.Run)
	}
	parts, err := cf.quotaServe.partitions(cf.quotaParts)
	if err != nil {
		return err
	}
	quotaConfig := sources.WatchedQuota(w)
	domainConfig := sources.WatchedDomains(w)
	var envoy envoyPartitions
	for _, p := range parts {
		qr, err := quotaserver.NewReplica(nc, quotaserver.ReplicaOptions{
			Options: quotaserver.Options{Node: cf.node, ServerID: opts.ServerID, Partition: p, Partitions: cf.quotaParts,
				Config: quotaConfig, Shadow: cf.shadow, Intake: cf.intake, Logger: log},
			Election: cf.election(nil),
		})
		if err != nil {
			return err
		}
		if cf.ops != nil {
			defer addLeader(&cf.ops.quotas, qr.Server)()
		}
		runs = append(runs, qr.Run)
		// Domain limits share the quota partitions: a partition's replica
		// group serves both, each with an election of its own.
		dr, err := domainserver.NewReplica(nc, domainserver.ReplicaOptions{
			Options: domainserver.Options{Node: cf.node, ServerID: opts.ServerID, Partition: p, Partitions: cf.quotaParts,
				Config: domainConfig, HoldTTL: cf.holdTTL, StateBucket: opts.StateBucket, Intake: cf.intake, Logger: log},
			Election: cf.election(nil),
		})
		if err != nil {
			return err
		}
		if cf.ops != nil {
			defer addLeader(&cf.ops.domains, dr.Server)()
		}
		runs = append(runs, dr.Run)
		// So do Envoy's rate limit counters (rls.go).
		er, err := envoy.add(nc, cf, opts.ServerID, p, log)
		if err != nil {
			return err
		}
		if cf.ops != nil {
			defer addLeader(&cf.ops.envoys, er.Server)()
		}
		runs = append(runs, er.Run)
	}
	front, err := centralRLS(nc, cf, w, &envoy, log)
	if err != nil {
		return err
	}
	if front != nil {
		runs = append(runs, front)
	}
	return runAll(ctx, runs)
}

// partitionMappings are the subject mappings of n quota, domain and
// Envoy partitions of node (none for one).
func partitionMappings(node string, n int) map[string]string {
	return subjects.Mappings(node, n)
}

// runAll runs each of runs until ctx ends or one fails; a failure stops
// the others, and the first error is returned.
func runAll(ctx context.Context, runs []func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(runs))
	for _, run := range runs {
		go func() {
			err := run(ctx)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first error
	for range runs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func defineCoordinator(fs *pflag.FlagSet) runFunc {
	var cf coordFlags
	cf.register(fs)
	var conn connFlags
	conn.register(fs)
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		cf.settle(fs)
		if err := cf.validate(); err != nil {
			return err
		}
		log, err := cf.logger(env)
		if err != nil {
			return err
		}
		cf.warnShortTTL(log)
		defer heapfloor.Start(ctx, cf.heapFloorBytes, log)()
		nc, err := connect(&conn, "allot coordinator "+cf.node, log)
		if err != nil {
			return err
		}
		defer nc.Close()
		if cf.metricsAddr != "" {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			cf.ops = cf.newOps(nc)
			url, err := startOps(ctx, cf.metricsAddr, false, cf.ops, log)
			if err != nil {
				return err
			}
			log.Info("serving metrics and health", "metrics", url+"/metrics", "healthz", url+"/healthz", "readyz", url+"/readyz", "dashboard", url+"/")
		}
		cf.rls.announce = func(addr string) {
			fmt.Fprintf(env.stdout, "allot coordinator: envoy rate limit service (gRPC: ShouldRateLimit, RLQS) at %s\n", addr)
		}
		if cf.parent != "" {
			log.Info("coordinator under a parent", "node", cf.node, "parent", cf.parent,
				"config", cf.configBucket+" mirrors "+cf.configBucket+" of JetStream domain "+cf.parent)
		}
		return serve(ctx, nc, &cf, log)
	}
}

// A coordinator's connection pings its server every connPingInterval
// and gives it up after connMaxPingsOut unanswered pings.
const (
	connPingInterval = time.Second
	connMaxPingsOut  = 2
)

// connect dials NATS for a coordinator: reconnects forever, leaves a
// server that stops answering within a few seconds, and logs connection
// changes.
func connect(conn *connFlags, name string, log *slog.Logger) (*nats.Conn, error) {
	return conn.dial(name,
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		// A server that stops answering without closing the connection
		// (frozen, its host cut off) is noticed only by unanswered pings:
		// with nats.go's default (every 2 minutes, two outstanding) a
		// leader on it went silent for its whole election TTL, until a
		// follower took over. Now it reconnects to another server within
		// about 3s and keeps leading.
		nats.PingInterval(connPingInterval),
		nats.MaxPingsOutstanding(connMaxPingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected", "err", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "url", nc.ConnectedUrl()) }),
		nats.ErrorHandler(agent.ErrorHandler(log)),
	)
}

// errorFromReply turns a micro error reply into a Go error.
func errorFromReply(m *nats.Msg) error {
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("coordinator error %s: %s", code, m.Header.Get("Nats-Service-Error"))
	}
	return nil
}

func isNoResponders(err error) bool { return errors.Is(err, nats.ErrNoResponders) }
