package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// ClosedLoop is the shape of a closed-loop load (the load and quota
// benchmarks): how long, in how many phases, and at what concurrency.
type ClosedLoop struct {
	// Duration is the measured time per target, split over Phases.
	Duration time.Duration `json:"duration_ns"`
	// Warmup runs before each measured phase and is not recorded.
	Warmup time.Duration `json:"warmup_ns"`
	// Phases alternates baseline and responder this many times so slow
	// drifts of a shared machine hit both alike.
	Phases int `json:"phases"`
	// Conns is the number of NATS connections the simulated clients share.
	Conns int `json:"conns"`
	// Clients is the number of simulated clients (distinct client ids).
	Clients int `json:"clients"`
	// Pipeline is the number of requests each client keeps in flight.
	Pipeline int `json:"pipeline"`
}

// fill sets the unset fields of c from d.
func (c *ClosedLoop) fill(d ClosedLoop) {
	orDefault(&c.Duration, d.Duration)
	orDefault(&c.Warmup, d.Warmup)
	orDefault(&c.Phases, d.Phases)
	orDefault(&c.Conns, d.Conns)
	orDefault(&c.Clients, d.Clients)
	orDefault(&c.Pipeline, d.Pipeline)
}

// LoadOptions configure the load benchmark. Zero fields take the defaults
// of DefaultLoadOptions.
type LoadOptions struct {
	ClosedLoop
	// Resources is the number of distinct resources (M).
	Resources int `json:"resources"`
	// PerRequest is the number of resources named in one request.
	PerRequest int `json:"per_request"`
	// Round is the coordinator's round interval; 0 answers at once.
	Round time.Duration `json:"round_ns"`
	// JSON sends the requests in JSON, as `nats req` and clients without
	// protobuf do, instead of binary protobuf.
	JSON bool `json:"json,omitempty"`
	// LeasePartitions, above 1, adds a target: that many coordinator
	// processes, one per lease partition of a node, each request sent to
	// the partition owning its resource (PerRequest must be 1). Their CPU
	// is summed.
	LeasePartitions int `json:"lease_partitions,omitempty"`
	// PartitionsOneProcess, with LeasePartitions, adds another target:
	// the same partitions, of another node, all served by one process (as
	// `allot coordinator --lease-serve all` does), to tell what the
	// partitions cost from what the processes do.
	PartitionsOneProcess bool `json:"partitions_one_process,omitempty"`
	// PartitionProcs is the GOMAXPROCS of each partition's process; unset,
	// its share of the cores (this process's GOMAXPROCS over
	// LeasePartitions, at least 1), as the single coordinator's is all of
	// them (the Go default).
	PartitionProcs int `json:"partition_gomaxprocs,omitempty"`
}

// encoding is the requests' encoding.
func (o *LoadOptions) encoding() wire.Encoding {
	if o.JSON {
		return wire.JSON
	}
	return wire.Protobuf
}

// DefaultLoadOptions are the options of a full run; short runs shorten
// Duration and Warmup.
func DefaultLoadOptions(short bool) LoadOptions {
	o := LoadOptions{
		ClosedLoop: ClosedLoop{Duration: 20 * time.Second, Warmup: 2 * time.Second, Phases: 2, Conns: 4, Clients: 256, Pipeline: 2},
		Resources:  8, PerRequest: 1,
	}
	if short {
		o.Duration, o.Warmup = 10*time.Second, time.Second
	}
	return o
}

// orDefault sets *v to def when it is unset (zero or negative).
func orDefault[T int | time.Duration | float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func (o *LoadOptions) fill(short bool) {
	d := DefaultLoadOptions(short)
	o.ClosedLoop.fill(d.ClosedLoop)
	orDefault(&o.Resources, d.Resources)
	orDefault(&o.PerRequest, d.PerRequest)
	o.PerRequest = min(o.PerRequest, o.Resources)
	if o.LeasePartitions > 1 && o.PartitionProcs <= 0 {
		o.PartitionProcs = coreShare(runtime.GOMAXPROCS(0), o.LeasePartitions)
	}
}

// coreShare is one of n processes' share of cores, at least one.
func coreShare(cores, n int) int { return max(1, cores/n) }

// LoadTarget is what one responder achieved.
type LoadTarget struct {
	Name     string  `json:"name"`
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	Seconds  float64 `json:"seconds"`
	RPS      float64 `json:"rps"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	P999us   float64 `json:"p999_us"`
	MaxUs    float64 `json:"max_us"`
	// CPUSeconds is the responder's CPU time (user+system) while measured;
	// CPUPerReqUs divides it by the requests answered.
	CPUSeconds  float64 `json:"cpu_seconds"`
	CPUPerReqUs float64 `json:"cpu_per_request_us"`
	// RSSMiB is the responder's resident set at the end, PeakRSSMiB its
	// high-water mark.
	RSSMiB     float64 `json:"rss_mib"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// GeneratorCPUSeconds is the CPU of the process running the load
	// generator and the nats-server (and, in process, the responder).
	GeneratorCPUSeconds float64 `json:"generator_cpu_seconds"`
	// Syscalls are the responder's read and write system calls while
	// measured, Switches its threads' context switches: per request,
	// they show how well it batches its I/O and wake-ups.
	Syscalls int64 `json:"syscalls"`
	Switches int64 `json:"context_switches"`
}

// LoadResult is the outcome of RunLoad.
type LoadResult struct {
	Machine  Machine     `json:"machine"`
	Options  LoadOptions `json:"options"`
	InFlight int         `json:"in_flight"`
	// CPUScope says whose CPU and RSS the figures are.
	CPUScope    string     `json:"cpu_scope"`
	Baseline    LoadTarget `json:"baseline"`
	Coordinator LoadTarget `json:"coordinator"`
	// Ratio is coordinator requests per second over the baseline's; the
	// target is at least TargetRatio.
	Ratio       float64 `json:"ratio"`
	TargetRatio float64 `json:"target_ratio"`
	// P99Ratio and CPURatio compare p99 latency and CPU per request; the
	// target of CPURatio is at most TargetCPURatio.
	P99Ratio       float64 `json:"p99_ratio"`
	CPURatio       float64 `json:"cpu_per_request_ratio"`
	TargetCPURatio float64 `json:"target_cpu_per_request_ratio"`
	// CoordinatorStats is the coordinator's micro STATS data at the end.
	CoordinatorStats *coordinator.Stats `json:"coordinator_stats,omitempty"`
	// Partitioned is the LeasePartitions target; PartitionCPURatio its CPU
	// per request (all partitions' processes) over the single
	// coordinator's, and PartitionShares each partition's share of the
	// requests its coordinator counted.
	Partitioned       *LoadTarget `json:"partitioned,omitempty"`
	PartitionCPURatio float64     `json:"partition_cpu_per_request_ratio,omitempty"`
	PartitionShares   []float64   `json:"partition_shares,omitempty"`
	// PartitionRequestsPerRound is the requests the partitions counted
	// over their rounds (warm-ups included), as the single coordinator's
	// STATS give it.
	PartitionRequestsPerRound float64 `json:"partition_requests_per_round,omitempty"`
	// OneProcess is the PartitionsOneProcess target; OneProcessCPURatio
	// its CPU per request over the single coordinator's.
	OneProcess         *LoadTarget `json:"one_process_partitions,omitempty"`
	OneProcessCPURatio float64     `json:"one_process_cpu_per_request_ratio,omitempty"`
}

// TargetLoadRatio is the throughput the coordinator must reach relative
// to the bare echo at the same concurrency, and TargetLoadCPURatio the
// most CPU per request it may spend relative to the echo's: a lease
// request should cost little more than a bare request-reply.
const (
	TargetLoadRatio    = 0.9
	TargetLoadCPURatio = 1.3
)

const echoSubject = "bench.echo"

// startServer starts an embedded JetStream nats-server on a random
// loopback port with its store under a new temporary directory.
func startServer() (*server.Server, func(), error) { return startServerMapped(nil) }

// startServerMapped is startServer with subject mappings (source →
// destination) in the global account.
func startServerMapped(mappings map[string]string) (*server.Server, func(), error) {
	dir, err := os.MkdirTemp("", "allot-bench-*")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	s, err := embed.Start(embed.Options{StoreDir: dir, Mappings: mappings})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return s, func() {
		s.Shutdown()
		s.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}, nil
}

// startEchoServer starts an embedded server (startServerMapped) and the
// bare echo every ratio is measured against. It returns the server's URL
// and the echo; stop stops both.
func startEchoServer(ctx context.Context, env *Env, mappings map[string]string) (url string, echo *helper, stop func(), err error) {
	srv, shutdown, err := startServerMapped(mappings)
	if err != nil {
		return "", nil, nil, err
	}
	url = srv.ClientURL()
	echo, err = env.startHelper(ctx, RoleEcho, url, []string{"--subject", echoSubject})
	if err != nil {
		shutdown()
		return "", nil, nil, err
	}
	return url, echo, func() { _ = echo.stop(); shutdown() }, nil
}

// RunLoad measures the coordinator and the bare echo baseline under the
// same closed-loop, pipelined load over TCP loopback.
func RunLoad(ctx context.Context, env *Env, o LoadOptions) (*LoadResult, error) {
	o.fill(env.Short)
	if env.Child == nil {
		o.PartitionProcs = 0 // one process: no partition has a GOMAXPROCS of its own
	}
	res := &LoadResult{Machine: DescribeMachine(), Options: o, InFlight: o.Clients * o.Pipeline, TargetRatio: TargetLoadRatio, TargetCPURatio: TargetLoadCPURatio}
	url, echo, stop, err := startEchoServer(ctx, env, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	coord, err := env.startHelper(ctx, RoleCoordinator, url, append([]string{"--round", o.Round.String()}, o.intakeArgs()...))
	if err != nil {
		return nil, err
	}
	defer func() { _ = coord.stop() }()
	res.CPUScope = "responder process alone (child process); the load generator and nats-server run in the parent, all on the same cores"
	if env.Child == nil {
		res.CPUScope = "whole process: responder, load generator and nats-server together (in-process mode)"
	}

	res.Baseline.Name, res.Coordinator.Name = "bare NATS echo", "coordinator"
	targets, helpers := []*LoadTarget{&res.Baseline, &res.Coordinator}, []*helper{echo, coord}
	if o.LeasePartitions > 1 {
		if o.PerRequest != 1 {
			return nil, fmt.Errorf("bench: %d lease partitions need one resource per request (not %d): the partitions of a request's resources differ", o.LeasePartitions, o.PerRequest)
		}
		parts, err := env.startLeaseParts(ctx, url, o)
		if err != nil {
			return nil, err
		}
		defer func() { _ = parts.stop() }()
		res.Partitioned = &LoadTarget{Name: fmt.Sprintf("coordinator, %d lease partitions", o.LeasePartitions)}
		targets, helpers = append(targets, res.Partitioned), append(helpers, parts)
		if o.PartitionsOneProcess {
			one, err := env.startOneProcessParts(ctx, url, o)
			if err != nil {
				return nil, err
			}
			defer func() { _ = one.stop() }()
			res.OneProcess = &LoadTarget{Name: fmt.Sprintf("coordinator, %d lease partitions in one process", o.LeasePartitions)}
			targets, helpers = append(targets, res.OneProcess), append(helpers, one)
		}
	}

	getSubj := coordinator.Subject(coordinator.DefaultNode, "capacity.get")
	g, err := newGenerator(url, o.Conns, o.Clients, o.Pipeline, func(client int) ([]byte, []string, error) {
		req := &allotpb.GetCapacityRequest{ClientId: fmt.Sprintf("load-client-%06d", client)}
		for k := 0; k < o.PerRequest; k++ {
			req.Resource = append(req.Resource, &allotpb.ResourceRequest{
				ResourceId: fmt.Sprintf("load/resource-%03d", (client*o.PerRequest+k)%o.Resources),
				Wants:      10,
			})
		}
		data, err := wire.Marshal(o.encoding(), req)
		subjs := []string{echoSubject, getSubj}
		if n := o.LeasePartitions; n > 1 {
			p := subjects.LeasePartition(req.Resource[0].GetResourceId(), n)
			subjs = append(subjs, subjects.LeaseSubject(partsNode, "capacity.get", p, n))
			if o.PartitionsOneProcess {
				subjs = append(subjs, subjects.LeaseSubject(onePartsNode, "capacity.get", p, n))
			}
		}
		return data, subjs, err
	})
	if err != nil {
		return nil, err
	}
	defer g.close()
	g.setContentType(o.encoding().ContentType())

	if _, err := g.alternate(ctx, env, "load", o.ClosedLoop, targets, helpers); err != nil {
		return nil, err
	}
	if res.Partitioned != nil {
		res.PartitionCPURatio = safeDiv(res.Partitioned.CPUPerReqUs, res.Coordinator.CPUPerReqUs)
		if all, err := fetchAllStats(g.conns[0], time.Second); err == nil {
			res.PartitionShares, res.PartitionRequestsPerRound = leaseShares(all, partsNode, o.LeasePartitions)
		}
		if res.OneProcess != nil {
			res.OneProcessCPURatio = safeDiv(res.OneProcess.CPUPerReqUs, res.Coordinator.CPUPerReqUs)
		}
	}
	res.Ratio = safeDiv(res.Coordinator.RPS, res.Baseline.RPS)
	res.P99Ratio = safeDiv(res.Coordinator.P99us, res.Baseline.P99us)
	res.CPURatio = safeDiv(res.Coordinator.CPUPerReqUs, res.Baseline.CPUPerReqUs)
	if all, err := fetchAllStats(g.conns[0], time.Second); err == nil {
		for _, st := range all {
			if st.Node == coordinator.DefaultNode {
				res.CoordinatorStats = &st
			}
		}
	}
	if err := env.writeJSON("load.json", res); err != nil {
		return res, err
	}
	return res, env.writeFile("load.md", []byte(res.Markdown()))
}

// alternate runs o.Phases rounds of one phase per target, in order (the
// index of the slots' subjects; hs are their responders), and fills in
// the targets. It returns the decisions decoded from the replies of
// targets after the first, by status.
func (g *generator) alternate(ctx context.Context, env *Env, name string, o ClosedLoop, targets []*LoadTarget, hs []*helper) (map[string]int64, error) {
	hists := make([]*hdrhistogram.Histogram, len(targets))
	for k := range hists {
		hists[k] = newHist()
	}
	statuses := map[string]int64{}
	for p := 0; p < o.Phases; p++ {
		for k, t := range targets {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			label := fmt.Sprintf("%s %s phase %d/%d", name, t.Name, p+1, o.Phases)
			ph, err := g.phase(ctx, env, label, k, hs[k].pid, o.Warmup, o.Duration/time.Duration(o.Phases))
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", label, err)
			}
			addPhase(t, ph)
			hists[k].Merge(ph.hist)
			for s, n := range ph.statuses {
				statuses[s] += n
			}
		}
	}
	for k, t := range targets {
		finishTarget(t, hists[k])
	}
	return statuses, nil
}

// addPhase adds a measured phase to t's totals.
func addPhase(t *LoadTarget, ph *phaseResult) {
	t.Requests += ph.requests
	t.Errors += ph.errors
	t.Seconds += ph.seconds
	t.CPUSeconds += ph.cpu.Seconds()
	t.GeneratorCPUSeconds += ph.selfCPU.Seconds()
	t.Syscalls += ph.syscalls
	t.Switches += ph.switches
	t.RSSMiB = float64(ph.end.rssKiB) / 1024
	t.PeakRSSMiB = max(t.PeakRSSMiB, float64(ph.end.hwmKiB)/1024)
}

// finishTarget computes t's rates and latency quantiles from its totals
// and the phases' merged histogram h.
func finishTarget(t *LoadTarget, h *hdrhistogram.Histogram) {
	t.RPS = float64(t.Requests) / t.Seconds
	t.P50us = float64(h.ValueAtQuantile(50))
	t.P99us = float64(h.ValueAtQuantile(99))
	t.P999us = float64(h.ValueAtQuantile(99.9))
	t.MaxUs = float64(h.Max())
	if t.Requests > 0 {
		t.CPUPerReqUs = t.CPUSeconds * 1e6 / float64(t.Requests)
	}
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func newHist() *hdrhistogram.Histogram {
	// 1µs to 60s at 3 significant digits.
	return hdrhistogram.New(1, 60_000_000, 3)
}

// generator is a closed-loop, pipelined load generator: every slot keeps
// one request in flight and sends the next as soon as its reply arrives,
// from the connection's reply handler.
type generator struct {
	conns []*nats.Conn
	lanes []*lane
	// decode, when set, samples replies of targets other than the first
	// (the echo) and counts them by the quota decision's status.
	decode bool
}

// decodeEvery is the sampling period of decoded replies.
const decodeEvery = 64

// lane is one connection's share of the slots.
type lane struct {
	nc     *nats.Conn
	prefix string
	sub    *nats.Subscription
	slots  []*loadSlot
	target atomic.Int32 // index into every slot's subjects
	// next, when set (generator.cycle), builds each request anew.
	next func(dst []byte) []byte

	mu        sync.Mutex
	hist      *hdrhistogram.Histogram
	recording bool
	stopping  bool
	requests  int64
	errors    int64
	inFlight  atomic.Int64
	decode    bool
	statuses  map[string]int64
}

type loadSlot struct {
	sent     atomic.Int64 // unix ns of the request in flight
	msg      nats.Msg
	subjects []string // per target
	buf      []byte   // the request built by lane.next
}

// newGenerator connects conns connections and spreads clients over them,
// each keeping pipeline requests in flight. request returns a client's
// binary protobuf payload and the subject it is sent to for each target,
// the same number of targets for every client.
func newGenerator(url string, conns, clients, pipeline int, request func(client int) ([]byte, []string, error)) (*generator, error) {
	g := &generator{}
	hdr := nats.Header{wire.HeaderContentType: []string{wire.ContentProtobuf}}
	for c := 0; c < conns; c++ {
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("allot bench load %d", c)))
		if err != nil {
			g.close()
			return nil, fmt.Errorf("bench: connect: %w", err)
		}
		g.conns = append(g.conns, nc)
		l := &lane{nc: nc, prefix: nats.NewInbox(), hist: newHist()}
		g.lanes = append(g.lanes, l)
		l.sub, err = nc.Subscribe(l.prefix+".*", l.onReply)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("bench: subscribe: %w", err)
		}
		_ = l.sub.SetPendingLimits(-1, -1)
	}
	for client := 0; client < clients; client++ {
		data, subjects, err := request(client)
		if err != nil {
			g.close()
			return nil, err
		}
		l := g.lanes[client%conns]
		for p := 0; p < pipeline; p++ {
			s := &loadSlot{msg: nats.Msg{Reply: l.prefix + "." + strconv.Itoa(len(l.slots)), Header: hdr, Data: data}, subjects: subjects}
			l.slots = append(l.slots, s)
		}
	}
	return g, nil
}

// setContentType sets the Content-Type header of every request; ""
// sends them without a header, as `nats req` does.
func (g *generator) setContentType(ct string) {
	var hdr nats.Header
	if ct != "" {
		hdr = nats.Header{wire.HeaderContentType: []string{ct}}
	}
	for _, l := range g.lanes {
		for _, s := range l.slots {
			s.msg.Header = hdr
		}
	}
}

// cycle has every slot send the requests of clients 0..n-1 in turn, one
// counter shared by all slots, each built by build into the slot's own
// buffer, instead of its own client's fixed payload: so all n clients
// are asked, not only one per slot. The subjects stay those of the
// slot's client.
func (g *generator) cycle(n int, build func(dst []byte, client int) []byte) {
	var next atomic.Int64
	for _, l := range g.lanes {
		l.next = func(dst []byte) []byte { return build(dst, int((next.Add(1)-1)%int64(n))) }
	}
}

func (g *generator) close() {
	for _, nc := range g.conns {
		nc.Close()
	}
}

func (l *lane) onReply(m *nats.Msg) {
	now := time.Now().UnixNano()
	i, err := strconv.Atoi(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	if err != nil || i < 0 || i >= len(l.slots) {
		return
	}
	s := l.slots[i]
	lat := (now - s.sent.Load()) / 1000
	bad := m.Header.Get("Nats-Service-Error-Code") != ""
	l.mu.Lock()
	if l.recording {
		l.requests++
		if bad {
			l.errors++
		}
		_ = l.hist.RecordValue(max(lat, 1))
		if l.decode && l.requests%decodeEvery == 0 && l.target.Load() > 0 {
			l.statuses[quotaStatus(m.Data)]++
		}
	}
	stop := l.stopping
	l.mu.Unlock()
	if stop {
		l.inFlight.Add(-1)
		return
	}
	l.send(s)
}

func (l *lane) send(s *loadSlot) {
	s.msg.Subject = s.subjects[l.target.Load()]
	if l.next != nil {
		// PublishMsg copies the payload: the buffer is the slot's again
		// when it returns.
		s.buf = l.next(s.buf[:0])
		s.msg.Data = s.buf
	}
	s.sent.Store(time.Now().UnixNano())
	if err := l.nc.PublishMsg(&s.msg); err != nil {
		l.inFlight.Add(-1)
	}
}

type phaseResult struct {
	requests, errors int64
	seconds          float64
	cpu, selfCPU     time.Duration
	syscalls         int64
	switches         int64
	end              procSample
	hist             *hdrhistogram.Histogram
	statuses         map[string]int64 // sampled decisions, when decoding
}

// phase runs the load against target (the index of the slots' subjects)
// for warmup+d and reports the measured part; pid is the responder's
// process for CPU and RSS ("" measures none).
func (g *generator) phase(ctx context.Context, env *Env, label string, target int, pid string, warmup, d time.Duration) (*phaseResult, error) {
	for _, l := range g.lanes {
		l.target.Store(int32(target))
		l.mu.Lock()
		l.hist.Reset()
		l.recording, l.stopping, l.requests, l.errors = false, false, 0, 0
		l.decode, l.statuses = g.decode, map[string]int64{}
		l.mu.Unlock()
		l.inFlight.Store(int64(len(l.slots)))
	}
	for _, l := range g.lanes {
		for _, s := range l.slots {
			l.send(s)
		}
	}
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	before, err := readProc(pid)
	if err != nil {
		return nil, err
	}
	selfBefore, _ := readProc("self")
	start := time.Now()
	for _, l := range g.lanes {
		l.mu.Lock()
		l.recording = true
		l.mu.Unlock()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	var last int64
	lastT := start
wait:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			break wait
		case t := <-tick.C:
			n := g.count()
			env.progressf("%s: %4.1fs/%v %8.0f req/s", label, t.Sub(start).Seconds(), d, float64(n-last)/t.Sub(lastT).Seconds())
			last, lastT = n, t
		}
	}
	r := &phaseResult{hist: newHist(), statuses: map[string]int64{}}
	for _, l := range g.lanes {
		l.mu.Lock()
		l.recording = false
		l.mu.Unlock()
	}
	r.seconds = time.Since(start).Seconds()
	after, err := readProc(pid)
	if err != nil {
		return nil, err
	}
	selfAfter, _ := readProc("self")
	r.cpu, r.end = after.cpu-before.cpu, after
	r.syscalls, r.switches = after.syscalls-before.syscalls, after.switches-before.switches
	r.selfCPU = selfAfter.cpu - selfBefore.cpu
	for _, l := range g.lanes {
		l.mu.Lock()
		l.stopping = true
		r.requests += l.requests
		r.errors += l.errors
		r.hist.Merge(l.hist)
		for s, n := range l.statuses {
			r.statuses[s] += n
		}
		l.mu.Unlock()
	}
	// Let the requests in flight drain before the next phase.
	drain := time.Now().Add(10 * time.Second)
	for time.Now().Before(drain) {
		var n int64
		for _, l := range g.lanes {
			n += l.inFlight.Load()
		}
		if n <= 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r, nil
}

func (g *generator) count() int64 {
	var n int64
	for _, l := range g.lanes {
		l.mu.Lock()
		n += l.requests
		l.mu.Unlock()
	}
	return n
}
