package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/quotaserver"
)

// QuotaOptions configure the quota benchmark. Zero fields take the
// defaults of DefaultQuotaOptions.
type QuotaOptions struct {
	// ClosedLoop is the load: Clients callers, each with its own bucket.
	ClosedLoop
	// Namespaces spreads the buckets over this many namespaces, which the
	// subject mapping spreads over the partitions.
	Namespaces int `json:"namespaces"`
	// Partitions lists the partition counts to measure, one run each.
	Partitions []int `json:"partitions"`
}

// DefaultQuotaOptions are the options of a full run; short runs shorten
// Duration and Warmup. 64 takes in flight: enough to keep the service
// busy on a shared 2-core machine (512, the load benchmark's, adds only
// queueing: the same decisions per second at several times the latency).
func DefaultQuotaOptions(short bool) QuotaOptions {
	o := QuotaOptions{
		ClosedLoop: ClosedLoop{Duration: 20 * time.Second, Warmup: 2 * time.Second, Phases: 2, Conns: 4, Clients: 64, Pipeline: 1},
		Namespaces: 8, Partitions: []int{1, 2},
	}
	if short {
		o.Duration, o.Warmup = 8*time.Second, time.Second
	}
	return o
}

func (o *QuotaOptions) fill(short bool) {
	d := DefaultQuotaOptions(short)
	o.ClosedLoop.fill(d.ClosedLoop)
	orDefault(&o.Namespaces, d.Namespaces)
	if len(o.Partitions) == 0 {
		o.Partitions = d.Partitions
	}
}

// QuotaRun is the quota service and its baseline at one partition count.
type QuotaRun struct {
	Partitions int        `json:"partitions"`
	Baseline   LoadTarget `json:"baseline"`
	Quota      LoadTarget `json:"quota"`
	// Ratio is decisions per second over the echo's replies per second;
	// the target is at least TargetQuotaRatio.
	Ratio    float64 `json:"ratio"`
	P99Ratio float64 `json:"p99_ratio"`
	CPURatio float64 `json:"cpu_per_request_ratio"`
	// Statuses counts the decisions of a sample of replies by status
	// ("OK", "OK_WAIT", "REJECTED"), to show what was measured.
	Statuses map[string]int64 `json:"statuses"`
	// DecisionsPerCoreSecond is decisions per second of the quota
	// process's CPU (the "per core" figure).
	DecisionsPerCoreSecond float64 `json:"decisions_per_core_second"`
	// TakesPerPartition is each partition's count of decisions (from its
	// micro STATS, warm-ups included): how the mapping spread the load.
	TakesPerPartition []uint64 `json:"takes_per_partition,omitempty"`
}

// QuotaBenchResult is the outcome of RunQuota.
type QuotaBenchResult struct {
	Machine     Machine      `json:"machine"`
	Options     QuotaOptions `json:"options"`
	InFlight    int          `json:"in_flight"`
	CPUScope    string       `json:"cpu_scope"`
	Runs        []QuotaRun   `json:"runs"`
	TargetRatio float64      `json:"target_ratio"`
}

// TargetQuotaRatio is the decision throughput the quota service must
// reach relative to the bare echo at the same concurrency: deciding may
// cost at most two fifths of the request rate a bare request-reply
// reaches.
const TargetQuotaRatio = 0.6

const quotaBenchNode = "root"

// quotaBenchConfig is the configuration the benchmark's quota service
// answers with: namespaces qb0..qb<n-1>, each creating a TOKEN_BUCKET per
// name that never runs dry, so every decision is an OK that has gone
// through bucket lookup (and, the first time, creation) and the algorithm.
func quotaBenchConfig(namespaces int) *quota.Config {
	c := &quota.Config{Namespaces: make(map[string]*quota.Namespace, namespaces)}
	for k := range namespaces {
		name := "qb" + strconv.Itoa(k)
		c.Namespaces[name] = &quota.Namespace{
			Name: name,
			Dynamic: &quota.Spec{
				Algorithm: quota.TokenBucket, Size: quota.MaxCount, FillRate: quota.MaxFillRate,
				WaitTimeout: time.Second, MaxDebt: 10 * time.Second, MaxTokensPerRequest: 1 << 20,
			},
			MaxDynamicBuckets: 1 << 20,
		}
	}
	return c
}

// serveQuota runs partitions quota servers, each on its own connection to
// url, answering with quotaBenchConfig(namespaces); stop stops them.
func serveQuota(ctx context.Context, url string, partitions, namespaces int, log *slog.Logger) (stop func(), err error) {
	cfg := quotaBenchConfig(namespaces)
	for _, ns := range cfg.Namespaces {
		if err := ns.Dynamic.Validate(); err != nil {
			return nil, fmt.Errorf("bench: quota namespace %s: %w", ns.Name, err)
		}
	}
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	for p := range partitions {
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("allot bench quota %d", p)))
		if err != nil {
			stop()
			return nil, fmt.Errorf("bench: quota partition %d: connect: %w", p, err)
		}
		stops = append(stops, nc.Close)
		s, err := quotaserver.New(nc, quotaserver.Options{
			Node: quotaBenchNode, Partition: p, Partitions: partitions,
			Config: sources.QuotaFunc(func() *quota.Config { return cfg }), Logger: log,
		})
		if err == nil {
			err = s.Start(ctx)
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("bench: quota partition %d: %w", p, err)
		}
		stops = append(stops, s.Stop)
	}
	slices.Reverse(stops) // servers stop before their connections close
	return stop, nil
}

// quotaBenchBucket is caller client's bucket: namespace qb<k>, name c<client>.
func quotaBenchBucket(client, namespaces int) (ns, name string) {
	return "qb" + strconv.Itoa(client%namespaces), "c" + strconv.Itoa(client)
}

// RunQuota measures the quota service's decisions against a bare NATS echo
// of the same payload, at the same concurrency, for each partition count.
func RunQuota(ctx context.Context, env *Env, o QuotaOptions) (*QuotaBenchResult, error) {
	o.fill(env.Short)
	for _, p := range o.Partitions {
		if p < 1 || p > 64 {
			return nil, fmt.Errorf("bench: quota partitions %d outside [1, 64]", p)
		}
	}
	res := &QuotaBenchResult{Machine: DescribeMachine(), Options: o, InFlight: o.Clients * o.Pipeline, TargetRatio: TargetQuotaRatio}
	res.CPUScope = "responder process alone (child process; all partitions in one); the callers and nats-server run in the parent, all on the same cores"
	if env.Child == nil {
		res.CPUScope = "whole process: quota service, callers and nats-server together (in-process mode)"
	}
	for _, p := range o.Partitions {
		run, err := runQuotaPartitions(ctx, env, o, p)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *run)
	}
	if err := env.writeJSON("quota.json", res); err != nil {
		return res, err
	}
	return res, env.writeFile("quota.md", []byte(res.Markdown()))
}

func runQuotaPartitions(ctx context.Context, env *Env, o QuotaOptions, partitions int) (*QuotaRun, error) {
	url, echo, stop, err := startEchoServer(ctx, env, quotaserver.Mappings(quotaBenchNode, partitions))
	if err != nil {
		return nil, err
	}
	defer stop()
	qs, err := env.startHelper(ctx, RoleQuota, url, []string{"--partitions", strconv.Itoa(partitions), "--namespaces", strconv.Itoa(o.Namespaces)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = qs.stop() }()

	g, err := newGenerator(url, o.Conns, o.Clients, o.Pipeline, func(client int) ([]byte, []string, error) {
		ns, name := quotaBenchBucket(client, o.Namespaces)
		one := int64(1)
		data, err := wire.Marshal(wire.Protobuf, &allotpb.QuotaTakeRequest{
			Bucket: ns + ":" + name, Tokens: &one, ClientId: "quota-bench-" + strconv.Itoa(client),
		})
		return data, []string{echoSubject, quotaserver.BucketSubject(quotaBenchNode, "take", ns, name)}, err
	})
	if err != nil {
		return nil, err
	}
	defer g.close()
	g.decode = true

	run := &QuotaRun{Partitions: partitions}
	run.Baseline.Name, run.Quota.Name = "bare NATS echo", fmt.Sprintf("quota service, %d partition(s)", partitions)
	run.Statuses, err = g.alternate(ctx, env, fmt.Sprintf("quota p=%d", partitions), o.ClosedLoop, []*LoadTarget{&run.Baseline, &run.Quota}, []*helper{echo, qs})
	if err != nil {
		return nil, err
	}
	run.Ratio = safeDiv(run.Quota.RPS, run.Baseline.RPS)
	run.P99Ratio = safeDiv(run.Quota.P99us, run.Baseline.P99us)
	run.CPURatio = safeDiv(run.Quota.CPUPerReqUs, run.Baseline.CPUPerReqUs)
	run.DecisionsPerCoreSecond = safeDiv(float64(run.Quota.Requests), run.Quota.CPUSeconds)
	if takes, err := fetchQuotaTakes(g.conns[0], partitions, 500*time.Millisecond); err == nil {
		run.TakesPerPartition = takes
	}
	return run, nil
}

// Markdown renders the result as a table.
func (r *QuotaBenchResult) Markdown() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "### Quota: take decisions over TCP loopback\n\n")
	fmt.Fprintf(&b, "%d callers (one bucket each, TOKEN_BUCKET never empty, in %d namespaces) on %d connections, %d in flight each (%d in all), binary protobuf on allot.root.quota.take.<ns>.<name>; the echo answers the same payload on one subject. %v measured per target in %d alternating phases after %v warm-up each.\n\n",
		o.Clients, o.Namespaces, o.Conns, o.Pipeline, r.InFlight, o.Duration, o.Phases, o.Warmup)
	var targets []LoadTarget
	for _, run := range r.Runs {
		targets = append(targets, run.Baseline, run.Quota)
	}
	b.WriteString(targetTable(targets...))
	b.WriteString("\n")
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "- **%d partition(s): quota / bare echo throughput %.2f× (target ≥ %.1f×: %s)**, p99 %.2f×, CPU per decision %.2f×; %.0f decisions per second of quota-process CPU; decisions seen: %s; decisions per partition: %s.\n",
			run.Partitions, run.Ratio, r.TargetRatio, verdict(run.Ratio >= r.TargetRatio), run.P99Ratio, run.CPURatio, run.DecisionsPerCoreSecond, statusList(run.Statuses), partitionList(run.TakesPerPartition))
	}
	fmt.Fprintf(&b, "\nCPU and RSS: %s.\n", r.CPUScope)
	return b.String()
}

func partitionList(takes []uint64) string {
	if len(takes) == 0 {
		return "unknown"
	}
	parts := make([]string, len(takes))
	for p, n := range takes {
		parts[p] = fmt.Sprintf("p%d %d", p, n)
	}
	return strings.Join(parts, ", ")
}

func statusList(m map[string]int64) string {
	var parts []string
	for _, s := range []string{"OK", "OK_WAIT", "REJECTED", "other"} {
		if n := m[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// quotaStatus names the status of a QuotaTakeResponse payload.
func quotaStatus(data []byte) string {
	var r allotpb.QuotaTakeResponse
	if proto.Unmarshal(data, &r) != nil {
		return "other"
	}
	switch st := r.GetStatus(); st {
	case allotpb.QuotaTakeResponse_OK, allotpb.QuotaTakeResponse_OK_WAIT, allotpb.QuotaTakeResponse_REJECTED:
		return st.String()
	}
	return "other"
}
