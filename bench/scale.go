package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/alloc"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Targets of the scale benchmark (issue 6).
const (
	// TargetFairShareMS bounds one FAIR_SHARE round over 100,000 clients.
	TargetFairShareMS = 20
	// TargetBytesPerLease bounds coordinator memory per client lease.
	TargetBytesPerLease = 300
)

// AlgoPoint is the cost of one allocation round of an algorithm.
type AlgoPoint struct {
	Algorithm    string  `json:"algorithm"`
	Clients      int     `json:"clients"`
	MS           float64 `json:"ms_per_round"`
	NSPerClient  float64 `json:"ns_per_client"`
	AllocsPerRun float64 `json:"allocs_per_round"`
	// SortMS is the same-run baseline: sorting the clients' n demand
	// ratios with slices.Sort (what a textbook water-filling does first).
	SortMS      float64 `json:"sort_ms"`
	RatioToSort float64 `json:"ratio_to_sort"`
}

// CoordPoint is a real coordinator holding Clients leases on one
// FAIR_SHARE resource, filled through NATS.
type CoordPoint struct {
	Clients int `json:"clients"`
	// FillSeconds is how long it took to hand out the leases (one request
	// per client, 1024 in flight, 20 ms rounds).
	FillSeconds float64 `json:"fill_seconds"`
	FillRPS     float64 `json:"fill_rps"`
	// BytesPerLease is the Go heap (live, after GC) of the coordinator's
	// state per client lease, client ids of 20 bytes included.
	BytesPerLease float64 `json:"bytes_per_lease"`
	// RoundMS is the median of the coordinator's own round time (STATS
	// last_round_ms) for one client's refresh with all the others held:
	// expiry, FAIR_SHARE over everyone, grant gating, reply.
	RoundMS    float64 `json:"round_ms"`
	MaxRoundMS float64 `json:"max_round_ms_during_fill"`
}

// ScaleResult is the outcome of RunScale.
type ScaleResult struct {
	Machine     Machine      `json:"machine"`
	Algorithms  []AlgoPoint  `json:"algorithms"`
	Coordinator []CoordPoint `json:"coordinator"`
	// FairShare100kMS is the FAIR_SHARE round over 100,000 clients;
	// BytesPerLease100k the coordinator's memory per lease at 100,000.
	FairShare100kMS     float64 `json:"fair_share_100k_ms"`
	Coordinator100kMS   float64 `json:"coordinator_round_100k_ms"`
	BytesPerLease100k   float64 `json:"bytes_per_lease_100k"`
	TargetFairShareMS   float64 `json:"target_fair_share_ms"`
	TargetBytesPerLease float64 `json:"target_bytes_per_lease"`
}

// RunScale measures round cost against clients per resource for each
// algorithm (in memory, against sorting as baseline) and a real
// coordinator's memory per lease and round time (through NATS).
func RunScale(ctx context.Context, env *Env) (*ScaleResult, error) {
	res := &ScaleResult{Machine: DescribeMachine(), TargetFairShareMS: TargetFairShareMS, TargetBytesPerLease: TargetBytesPerLease}
	sizes := []int{1_000, 10_000, 100_000, 1_000_000}
	minTime := 400 * time.Millisecond
	if env.Short {
		minTime = 150 * time.Millisecond
	}
	kinds := []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE, allotpb.Algorithm_STATIC, allotpb.Algorithm_NO_ALGORITHM}
	for _, n := range sizes {
		d := scaleDemands(n)
		ratios := make([]float64, n)
		for i := range d {
			ratios[i] = d[i].Wants / d[i].Weight
		}
		buf := make([]float64, n)
		sortNS := measure(minTime, func() {
			copy(buf, ratios)
			slices.Sort(buf)
		})
		for _, kind := range kinds {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			var s alloc.Scratch
			capacity := float64(n) * 5 // contended: mean wants is 9.5
			run := func() { alloc.Run(kind, capacity, d, &s) }
			ns := measure(minTime, run)
			allocs := allocsPerRun(3, run)
			p := AlgoPoint{Algorithm: kind.String(), Clients: n, MS: ns / 1e6, NSPerClient: ns / float64(n),
				AllocsPerRun: allocs, SortMS: sortNS / 1e6, RatioToSort: ns / sortNS}
			res.Algorithms = append(res.Algorithms, p)
			env.progressf("scale: %-18s %8d clients  %9.3f ms/round  (sort %9.3f ms, ratio %.2f)", p.Algorithm, n, p.MS, p.SortMS, p.RatioToSort)
			if kind == allotpb.Algorithm_FAIR_SHARE && n == 100_000 {
				res.FairShare100kMS = p.MS
			}
		}
	}

	coordSizes := []int{1_000, 10_000, 100_000, 1_000_000}
	if env.Short {
		coordSizes = coordSizes[:3]
	}
	srv, shutdown, err := startServer()
	if err != nil {
		return nil, err
	}
	defer shutdown()
	for _, n := range coordSizes {
		p, err := coordScale(ctx, env, srv.ClientURL(), n)
		if err != nil {
			return nil, err
		}
		res.Coordinator = append(res.Coordinator, *p)
		env.progressf("scale: coordinator %8d leases  %6.0f B/lease  round %7.3f ms  (filled in %.1fs, %.0f req/s)", n, p.BytesPerLease, p.RoundMS, p.FillSeconds, p.FillRPS)
		if n == 100_000 {
			res.BytesPerLease100k, res.Coordinator100kMS = p.BytesPerLease, p.RoundMS
		}
	}
	if err := env.writeJSON("scale.json", res); err != nil {
		return res, err
	}
	if err := env.writeFile("scale.svg", res.plot()); err != nil {
		return res, err
	}
	return res, env.writeFile("scale.md", []byte(res.Markdown()))
}

// scaleDemands makes n demands with wants spread over 0..19 and weight 1.
func scaleDemands(n int) []alloc.Demand {
	rng := rand.New(rand.NewPCG(uint64(n), 6))
	d := make([]alloc.Demand, n)
	for i := range d {
		d[i] = alloc.Demand{Wants: float64(rng.IntN(20)) + rng.Float64(), Weight: 1}
	}
	return d
}

// measure returns the median time per call of f over five samples of at
// least minTime/5 each.
func measure(minTime time.Duration, f func()) float64 {
	f() // warm caches and scratch buffers
	samples := make([]float64, 0, 5)
	iters := 1
	for len(samples) < 5 {
		start := time.Now()
		for range iters {
			f()
		}
		el := time.Since(start)
		if el < minTime/5 {
			iters = max(iters*2, int(float64(iters)*float64(minTime/5)/float64(max(el, 1))))
			continue
		}
		samples = append(samples, float64(el)/float64(iters))
	}
	slices.Sort(samples)
	return samples[2]
}

// coordScale fills a fresh in-process coordinator with n leases on one
// resource and measures its heap per lease and its round time.
func coordScale(ctx context.Context, env *Env, url string, n int) (*CoordPoint, error) {
	node := "scale" + strconv.Itoa(n)
	nc, err := nats.Connect(url, nats.Name("allot bench scale coordinator"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer nc.Close()
	tmpl := benchTemplate(float64(n)*5, 30*time.Minute, 10*time.Minute)
	tmpl.Glob = "scale"
	c, err := startCoordinator(ctx, nc, coordOptions{
		node: node, round: coordinator.DefaultRoundInterval, bucket: "bench_" + node,
		tmpls: coordinator.StaticTemplates(config.NewSet(1, []*config.Template{tmpl}, nil)),
	}, env.logger())
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	subject := coordinator.Subject(node, "capacity.get")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	if err := fillLeases(ctx, env, url, subject, n, 1024); err != nil {
		return nil, err
	}
	p := &CoordPoint{Clients: n, FillSeconds: time.Since(start).Seconds()}
	p.FillRPS = float64(n) / p.FillSeconds
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	p.BytesPerLease = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)

	st, err := fetchStats(nc)
	if err != nil {
		return nil, err
	}
	p.MaxRoundMS = st.MaxRoundMS
	// One client refreshes at a time; the coordinator's own round timer
	// says what the round over all n cost.
	var rounds []float64
	for i := 0; i < 15; i++ {
		data, _ := wire.Marshal(wire.Protobuf, scaleRequest(i*(n/15), n))
		msg := &nats.Msg{Subject: subject, Header: nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}, Data: data}
		if _, err := nc.RequestMsg(msg, 10*time.Second); err != nil {
			return nil, fmt.Errorf("bench: refresh: %w", err)
		}
		for try := 0; try < 100; try++ {
			s, err := fetchStats(nc)
			if err != nil {
				return nil, err
			}
			if s.Rounds > st.Rounds {
				st = s
				rounds = append(rounds, s.LastRoundMS)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	slices.Sort(rounds)
	if len(rounds) > 0 {
		p.RoundMS = rounds[len(rounds)/2]
	}
	runtime.KeepAlive(c)
	return p, nil
}

func scaleRequest(i, n int) *allotpb.GetCapacityRequest {
	return &allotpb.GetCapacityRequest{
		ClientId: fmt.Sprintf("scale-client-%07d", i),
		Resource: []*allotpb.ResourceRequest{{ResourceId: "scale", Wants: float64((i*7919)%20) + 0.5}},
	}
}

// fillLeases asks for a lease as each of n clients, conc requests in
// flight, encoding requests as it goes so that nothing but the
// coordinator's state stays in memory.
func fillLeases(ctx context.Context, env *Env, url, subject string, n, conc int) error {
	nc, err := nats.Connect(url, nats.Name("allot bench scale fill"))
	if err != nil {
		return fmt.Errorf("bench: connect: %w", err)
	}
	defer nc.Close()
	prefix := nats.NewInbox()
	var next, done, errs atomic.Int64
	finished := make(chan struct{})
	var once sync.Once
	hdr := nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}
	send := func(slot int) {
		i := int(next.Add(1) - 1)
		if i >= n {
			if done.Add(1) == int64(conc) {
				once.Do(func() { close(finished) })
			}
			return
		}
		data, _ := wire.Marshal(wire.Protobuf, scaleRequest(i, n))
		if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: prefix + "." + strconv.Itoa(slot), Header: hdr, Data: data}); err != nil {
			errs.Add(1)
		}
	}
	sub, err := nc.Subscribe(prefix+".*", func(m *nats.Msg) {
		if m.Header.Get("Nats-Service-Error-Code") != "" {
			errs.Add(1)
		}
		slot, _ := strconv.Atoi(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		send(slot)
	})
	if err != nil {
		return fmt.Errorf("bench: subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	conc = min(conc, n)
	for s := 0; s < conc; s++ {
		send(s)
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	timeout := time.After(5 * time.Minute)
	for {
		select {
		case <-finished:
			if e := errs.Load(); e > 0 {
				return fmt.Errorf("bench: %d of %d lease requests failed", e, n)
			}
			return nil
		case <-tick.C:
			env.progressf("scale: filling %d leases: %d sent", n, min(next.Load(), int64(n)))
		case <-timeout:
			return fmt.Errorf("bench: filling %d leases: timed out at %d", n, next.Load())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *ScaleResult) plot() []byte {
	c := chart{title: "Allocation round cost against clients per resource", xLabel: "clients per resource",
		yLabel: "ms per round (log)", logX: true, logY: true}
	by := map[string]*series{}
	var order []string
	add := func(name string, x, y float64, dash bool) {
		s := by[name]
		if s == nil {
			s = &series{name: name, dash: dash}
			by[name] = s
			order = append(order, name)
		}
		s.x, s.y = append(s.x, x), append(s.y, y)
	}
	for _, p := range r.Algorithms {
		add(p.Algorithm, float64(p.Clients), p.MS, false)
	}
	for _, p := range r.Algorithms {
		if p.Algorithm == allotpb.Algorithm_FAIR_SHARE.String() {
			add("sort baseline", float64(p.Clients), p.SortMS, true)
		}
	}
	for _, p := range r.Coordinator {
		add("coordinator round", float64(p.Clients), p.RoundMS, false)
	}
	for _, n := range order {
		c.series = append(c.series, *by[n])
	}
	c.series = append(c.series, series{name: "target 20ms@100k", x: []float64{100_000}, y: []float64{TargetFairShareMS}, color: "#000"})
	return c.svg()
}

// Markdown renders the result as tables.
func (r *ScaleResult) Markdown() string {
	var b strings.Builder
	b.WriteString("### Scale: allocation round cost against clients per resource\n\n")
	b.WriteString("One round of each algorithm over n contended demands (internal/alloc, median of 5 samples), next to the same-run baseline of sorting the n demand ratios.\n\n")
	var rows [][]string
	for _, p := range r.Algorithms {
		rows = append(rows, []string{p.Algorithm, strconv.Itoa(p.Clients), f3(p.MS), f1(p.NSPerClient), f0(p.AllocsPerRun), f3(p.SortMS), f2(p.RatioToSort)})
	}
	b.WriteString(table([]string{"algorithm", "clients", "ms/round", "ns/client", "allocs", "sort ms", "÷ sort"}, rows))
	fmt.Fprintf(&b, "\n**FAIR_SHARE over 100,000 clients: %.3f ms (target ≤ %d ms: %s).**\n\n", r.FairShare100kMS, TargetFairShareMS, verdict(r.FairShare100kMS > 0 && r.FairShare100kMS <= TargetFairShareMS))
	b.WriteString("A real coordinator (in process, over NATS) with n clients holding leases on one FAIR_SHARE resource: heap per lease (live heap after GC, before and after filling; includes the 20-byte client ids) and the coordinator's own round time (STATS last_round_ms, median of 15) when one client refreshes while all others hold leases.\n\n")
	rows = rows[:0]
	for _, p := range r.Coordinator {
		rows = append(rows, []string{strconv.Itoa(p.Clients), f0(p.BytesPerLease), f3(p.RoundMS), f1(p.MaxRoundMS), f1(p.FillSeconds), f0(p.FillRPS)})
	}
	b.WriteString(table([]string{"leases", "bytes/lease", "round ms", "max round ms (fill)", "fill s", "fill req/s"}, rows))
	fmt.Fprintf(&b, "\n**Coordinator memory per lease at 100,000: %.0f bytes (target ≤ %d: %s); end-to-end round over 100,000: %.3f ms.**\n\n",
		r.BytesPerLease100k, TargetBytesPerLease, verdict(r.BytesPerLease100k > 0 && r.BytesPerLease100k <= TargetBytesPerLease), r.Coordinator100kMS)
	b.WriteString("![round cost](scale.svg)\n")
	return b.String()
}
