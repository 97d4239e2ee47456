package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/allot/allot/bench"
)

// benchmarks are the subcommands of allot bench, one per benchmark.
var benchmarks = []struct{ name, summary string }{
	{"load", "GetCapacity throughput, latency and coordinator CPU against a bare NATS echo"},
	{"quota", "quota take decisions per second and latency, 1 and 2 partitions, against a bare NATS echo"},
	{"charon", "domain-limit (Charon) decisions against a bare NATS echo"},
	{"envoy", "Envoy's ShouldRateLimit over gRPC against envoyproxy/ratelimit with Redis"},
	{"overload", "an elected coordinator flooded beside clients holding leases"},
	{"scale", "allocation round cost and memory per lease from 1k to 1M clients"},
	{"up", "a plain allot up with 200k and 1M JSON clients refreshing one resource, against an echo of the same reply size"},
	{"agent", "the agent's hot path (Allow, Wait, ReserveN, Gauge.Acquire) against x/time/rate"},
	{"sim", "the one-level convergence simulation, then scenario 7"},
	{"sim7", "scenario 7: Doorman's three-level tree with a leader lost and a leaf link cut"},
	{"failover", "capacity handed out after kill -9 of the serving coordinator and a parent server's restart"},
	{"planet", "a three-level tree of a million clients in virtual time: over-grant, utilization, reconvergence"},
	{"all", "every benchmark, with one report"},
}

// benchCommand is allot bench: a subcommand per benchmark, sharing the
// flags (see bench/README.md). `allot bench child ROLE` is the helper
// process the benchmarks start (a coordinator, a bare echo responder...),
// with flags of its own.
func benchCommand(env *cliEnv) *cobra.Command {
	c := group(env, "bench", "run the benchmarks: load, quota, charon, envoy, overload, scale, up, agent, sim, sim7, failover, planet or all (see bench/README.md)")
	run := defineBench(c.PersistentFlags())
	for _, b := range benchmarks {
		c.AddCommand(&cobra.Command{Use: b.name, Short: b.summary, RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			return run(cmd.Context(), env, []string{b.name})
		}})
	}
	c.AddCommand(&cobra.Command{
		Use: "child ROLE [flags]", Short: "a helper process of the benchmarks: coordinator, echo, quota, domain or replica",
		Hidden: true, DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usageError{errors.New("want a role: coordinator, echo, quota, domain or replica")}
			}
			return bench.ServeChild(cmd.Context(), args[0], args[1:], env.stdout, env.stderr)
		},
	})
	return c
}

// defineBench registers the benchmarks' flags; its body runs the one
// benchmark args names.
func defineBench(fs *pflag.FlagSet) runFunc {
	out := fs.String("out", "", "directory for the JSON, markdown and SVG results (default: a new directory under "+os.TempDir()+"; the committed results are bench/results)")
	short := fs.Bool("short", false, "run the short variant (what 'task bench' runs, under 5 minutes in all)")
	inProcess := fs.Bool("in-process", false, "load: run the coordinator and echo in this process instead of child processes (CPU and RSS then cover everything)")
	verbose := fs.BoolP("verbose", "v", false, "log diagnostics")
	profile := fs.String("profile", "", "directory where every helper process writes its CPU and heap profiles (pprof)")
	lo := bench.LoadOptions{}
	fs.DurationVar(&lo.Duration, "duration", 0, "load: measured time per responder (default 20s, short 10s)")
	fs.DurationVar(&lo.Warmup, "warmup", 0, "load: warm-up before each measured phase (default 2s, short 1s)")
	fs.IntVar(&lo.Phases, "phases", 0, "load: alternations of baseline and coordinator (default 2)")
	fs.IntVar(&lo.Conns, "conns", 0, "load: NATS connections of the load generator (default 4)")
	fs.IntVar(&lo.Clients, "clients", 0, "load: simulated clients (default 256); planet: clients per cluster node (default 100, 1000 for the full million)")
	fs.IntVar(&lo.Pipeline, "pipeline", 0, "load: requests each client keeps in flight (default 2)")
	fs.IntVar(&lo.Resources, "resources", 0, "load: distinct resources M (default 8)")
	fs.IntVar(&lo.PerRequest, "per-request", 0, "load: resources named in one request (default 1)")
	fs.IntVar(&lo.LeasePartitions, "lease-partitions", 0, "load: also measure a node of this many lease partitions, one coordinator process each, every request sent to the partition owning its resource (compare their summed CPU per request with one coordinator's; needs --per-request 1)")
	fs.BoolVar(&lo.PartitionsOneProcess, "partitions-one-process", false, "load: with --lease-partitions, also measure the same partitions all served by one process (as allot coordinator --lease-serve all), to tell the partitions' cost from the processes'")
	fs.IntVar(&lo.PartitionProcs, "partition-gomaxprocs", 0, "load: GOMAXPROCS of each lease partition's process (default: its share of the cores, GOMAXPROCS over --lease-partitions, at least 1; the single coordinator keeps the Go default, all of them)")
	fs.DurationVar(&lo.Round, "round", 0, "load: coordinator round interval (0 answers at once)")
	fs.BoolVar(&lo.JSON, "json", false, "load: send the GetCapacity requests in JSON instead of binary protobuf")
	parts := fs.String("quota-partitions", "1,2", "quota: partition counts to measure, comma-separated")
	eo := bench.EnvoyOptions{}
	fs.IntVar(&eo.InFlight, "in-flight", 0, "envoy: ShouldRateLimit calls in flight (default 64); --conns (gRPC connections, default 4), --duration, --warmup and --phases apply too")
	fs.IntVar(&eo.Keys, "keys", 0, "envoy: distinct descriptor values the calls cycle through (default 1000)")
	fs.BoolVar(&eo.NoReference, "no-reference", false, "envoy: do not build and run envoyproxy/ratelimit with Redis")
	fo := bench.FailoverOptions{}
	fs.IntVar(&fo.Claimants, "claimants", 0, "failover: agents claiming the one resource (default 5000)")
	fs.DurationVar(&fo.Lease, "lease", 0, "failover: lease length (default 10s)")
	fs.DurationVar(&fo.Refresh, "refresh", 0, "failover: refresh interval (default 2s)")
	fs.DurationVar(&fo.Down, "down", 0, "failover: how long the parent level's NATS server stays down (default 15s)")
	fs.DurationVar(&fo.Observe, "observe", 0, "failover: the most to watch after the fault, ending once 90% has held for 10s (default 3m, short 1m)")
	leases := fs.String("leases", "", "up: clients holding leases on the one resource, comma-separated sizes, each in a fresh allot up (default 200000,1000000; short 50000); --conns, --clients (requests in flight, default 256), --duration, --warmup and --phases apply too")
	upArgs := fs.String("up-args", "", "up: flags added to allot up's command line, space-separated (default none: allot up as shipped)")
	inFlight := fs.Int("max-in-flight", 0, "overload: the coordinator's intake bound (default that of allot coordinator)")
	namespaces := fs.Int("namespaces", 0, "quota: namespaces the callers' buckets are spread over (default 8); --conns, --clients (default 64), --pipeline (default 1), --duration, --warmup and --phases apply too")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		what := args[0]
		// The quota benchmark shares the load benchmark's concurrency flags.
		qo := bench.QuotaOptions{ClosedLoop: lo.ClosedLoop, Namespaces: *namespaces}
		var err error
		if qo.Partitions, err = parseCounts("--quota-partitions", *parts, 64); err != nil {
			return err
		}
		log := slog.New(slog.DiscardHandler)
		if *verbose {
			log = slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		// A fresh directory by default, so that a casual run never overwrites
		// the committed results.
		if *out == "" {
			dir, err := os.MkdirTemp("", "allot-bench-")
			if err != nil {
				return fmt.Errorf("results directory: %w", err)
			}
			*out = dir
		}
		fmt.Fprintf(env.stderr, "allot bench: results go to %s\n", *out)
		benv := &bench.Env{OutDir: *out, Progress: env.stderr, Log: log, Short: *short, ProfileDir: *profile}
		if !*inProcess {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own executable for helper processes: %w (use --in-process)", err)
			}
			benv.Child = func(ctx context.Context, role string, args []string) *exec.Cmd {
				return exec.CommandContext(ctx, exe, append([]string{"bench", "child", role}, args...)...)
			}
			benv.Allot = func(ctx context.Context, args ...string) *exec.Cmd { return exec.CommandContext(ctx, exe, args...) }
		}
		start := time.Now()
		switch what {
		case "load":
			var r *bench.LoadResult
			if r, err = bench.RunLoad(ctx, benv, lo); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "quota":
			var r *bench.QuotaBenchResult
			if r, err = bench.RunQuota(ctx, benv, qo); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "overload":
			var r *bench.OverloadResult
			if r, err = bench.RunOverload(ctx, benv, bench.OverloadOptions{MaxInFlight: *inFlight}); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "charon":
			var r *bench.CharonBenchResult
			if r, err = bench.RunCharon(ctx, benv, bench.CharonOptions{ClosedLoop: qo.ClosedLoop}); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "envoy":
			eo.Duration, eo.Warmup, eo.Phases, eo.Conns = lo.Duration, lo.Warmup, lo.Phases, lo.Conns
			var r *bench.EnvoyBenchResult
			if r, err = bench.RunEnvoy(ctx, benv, eo); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "scale":
			var r *bench.ScaleResult
			if r, err = bench.RunScale(ctx, benv); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "up":
			uo := bench.UpOptions{ClosedLoop: lo.ClosedLoop, UpArgs: strings.Fields(*upArgs)}
			if *leases != "" { // else the benchmark's default
				if uo.Leases, err = parseCounts("--leases", *leases, 100_000_000); err != nil {
					return err
				}
			}
			var r *bench.UpResult
			if r, err = bench.RunUp(ctx, benv, uo); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "agent":
			var r *bench.AgentResult
			if r, err = bench.RunAgent(ctx, benv); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "sim":
			var r *bench.SimResult
			if r, err = bench.RunSim(ctx, benv); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
			if err == nil {
				err = runSim7(ctx, env, benv)
			}
		case "sim7":
			err = runSim7(ctx, env, benv)
		case "failover":
			var r *bench.FailoverResult
			if r, err = bench.RunFailover(ctx, benv, fo); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "planet":
			var r *bench.PlanetResult
			if r, err = bench.RunPlanet(ctx, benv, bench.PlanetOptions{ClientsPerCluster: lo.Clients}); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		case "all":
			var r *bench.AllResult
			if r, err = bench.RunAll(ctx, benv, lo, qo); r != nil {
				fmt.Fprintln(env.stdout, r.Markdown())
			}
		}
		fmt.Fprintf(env.stderr, "allot bench %s: done in %v; results in %s\n", what, time.Since(start).Round(time.Second), *out)
		return err
	}
}

// runSim7 runs the three-level scenario 7 and prints its report.
func runSim7(ctx context.Context, env *cliEnv, benv *bench.Env) error {
	r, err := bench.RunTreeSim(ctx, benv)
	if r != nil {
		fmt.Fprintln(env.stdout, r.Markdown())
	}
	return err
}

// parseCounts reads a flag's comma-separated counts in [1, most].
func parseCounts(flag, v string, most int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > most {
			return nil, usageError{fmt.Errorf("%s %q: want comma-separated counts in [1, %d]", flag, v, most)}
		}
		out = append(out, n)
	}
	return out, nil
}
