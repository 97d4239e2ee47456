package bench

import (
	"context"
	"fmt"
	"maps"
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
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Targets of the scale benchmark.
const (
	// TargetFairShareMS bounds one FAIR_SHARE round over 100,000 clients.
	TargetFairShareMS = 20
	// TargetBytesPerLease bounds coordinator memory per client lease, at
	// every size up to a million.
	TargetBytesPerLease = 300
	// TargetRefreshRatio and TargetRefreshP99Ratio bound a coordinator
	// holding the most leases measured against the bare NATS echo of the
	// same run, under the same closed-loop refreshes: at least this share
	// of its throughput, at most this multiple of its p99 latency.
	TargetRefreshRatio    = 0.8
	TargetRefreshP99Ratio = 2
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
	// Refresh compares the coordinator's refreshes with the bare echo
	// (measured at the largest size only).
	Refresh *RefreshLoad `json:"refresh,omitempty"`
}

// RefreshLoad is closed-loop refreshes of held leases against a
// coordinator holding Clients leases, beside the bare NATS echo answering
// the same requests in the same run (both in this process, on their own
// connections to the same server).
type RefreshLoad struct {
	Load        ClosedLoop `json:"load"`
	Round       string     `json:"round"`
	Echo        LoadTarget `json:"echo"`
	Coordinator LoadTarget `json:"coordinator"`
	// Ratio is the coordinator's requests per second over the echo's;
	// P99Ratio its p99 latency over the echo's.
	Ratio    float64 `json:"ratio"`
	P99Ratio float64 `json:"p99_ratio"`
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
	// Rounds is the ledger's round cost per changed client against the
	// clients held (in memory).
	Rounds []RoundPoint `json:"rounds"`
}

// RunScale measures round cost against clients per resource for each
// algorithm (in memory, against sorting as baseline) and a real
// coordinator's memory per lease and round time (through NATS).
func RunScale(ctx context.Context, env *Env) (*ScaleResult, error) {
	res := &ScaleResult{Machine: DescribeMachine(), TargetFairShareMS: TargetFairShareMS, TargetBytesPerLease: TargetBytesPerLease}
	var err error
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

	roundSizes := []int{10_000, 100_000, 1_000_000}
	if env.Short {
		roundSizes = roundSizes[:2]
	}
	if res.Rounds, err = ledgerRound(ctx, env, roundSizes, minTime); err != nil {
		return nil, err
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
	for k, n := range coordSizes {
		p, err := coordScale(ctx, env, srv.ClientURL(), n, k == len(coordSizes)-1)
		if err != nil {
			return nil, err
		}
		res.Coordinator = append(res.Coordinator, *p)
		env.progressf("scale: coordinator %8d leases  %6.0f B/lease  round %7.3f ms  (filled in %.1fs, %.0f req/s)", n, p.BytesPerLease, p.RoundMS, p.FillSeconds, p.FillRPS)
		if r := p.Refresh; r != nil {
			env.progressf("scale: refreshes at %d leases: coordinator %.0f req/s, p99 %.0f µs; echo %.0f req/s, p99 %.0f µs: %.2f×, p99 %.2f×",
				n, r.Coordinator.RPS, r.Coordinator.P99us, r.Echo.RPS, r.Echo.P99us, r.Ratio, r.P99Ratio)
		}
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
// resource and measures its heap per lease and its round time, and with
// refresh, closed-loop refreshes against the bare echo.
func coordScale(ctx context.Context, env *Env, url string, n int, refresh bool) (*CoordPoint, error) {
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
		tmpls: sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl}, nil)),
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
	if err := fillLeases(ctx, env, url, subject, n, 1024, wire.Protobuf, 20*time.Second); err != nil {
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
	if refresh {
		if p.Refresh, err = refreshLoad(ctx, env, url, subject, n); err != nil {
			return nil, err
		}
	}
	runtime.KeepAlive(c)
	return p, nil
}

// refreshLoad runs closed-loop refreshes of n held leases (clients spread
// over all of them) against the coordinator on subject and against the
// bare echo, alternating, both in this process.
func refreshLoad(ctx context.Context, env *Env, url, subject string, n int) (*RefreshLoad, error) {
	o := ClosedLoop{Duration: 20 * time.Second, Warmup: 2 * time.Second, Phases: 2, Conns: 4, Clients: 512, Pipeline: 1}
	if env.Short {
		o.Duration, o.Warmup = 8*time.Second, time.Second
	}
	o.Clients = min(o.Clients, n)
	enc, err := nats.Connect(url, nats.Name("allot bench scale echo"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer enc.Close()
	sub, err := serveEcho(enc, echoSubject, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	inProcess := func(role string) *helper { return &helper{role: role, pid: "self", stop: func() error { return nil }} }
	g, err := newGenerator(url, o.Conns, o.Clients, o.Pipeline, func(client int) ([]byte, []string, error) {
		data, err := wire.Marshal(wire.Protobuf, scaleRequest(client*(n/o.Clients), n))
		return data, []string{echoSubject, subject}, err
	})
	if err != nil {
		return nil, err
	}
	defer g.close()
	r := &RefreshLoad{Load: o, Round: roundLabel(coordinator.DefaultRoundInterval)}
	r.Echo.Name, r.Coordinator.Name = "bare NATS echo", fmt.Sprintf("coordinator holding %d leases", n)
	if _, err := g.alternate(ctx, env, "scale refresh", o, []*LoadTarget{&r.Echo, &r.Coordinator}, []*helper{inProcess(RoleEcho), inProcess(RoleCoordinator)}); err != nil {
		return nil, err
	}
	r.Ratio = safeDiv(r.Coordinator.RPS, r.Echo.RPS)
	r.P99Ratio = safeDiv(r.Coordinator.P99us, r.Echo.P99us)
	return r, nil
}

func scaleRequest(i, n int) *allotpb.GetCapacityRequest {
	return &allotpb.GetCapacityRequest{
		ClientId: scaleClientID(i),
		Resource: []*allotpb.ResourceRequest{{ResourceId: scaleResource, Wants: scaleWants(i)}},
	}
}

// scaleResource is the one resource the scale benchmarks' clients share.
const scaleResource = "scale"

func scaleClientID(i int) string { return fmt.Sprintf("scale-client-%07d", i) }

// scaleWants spreads the clients' wants over 0.5..19.5.
func scaleWants(i int) float64 { return float64((i*7919)%20) + 0.5 }

// appendScaleRequest appends client i of n's request (scaleRequest) in
// enc: binary protobuf, or JSON as a person writes it for `nats req`
// (the shape subjects.md documents: proto field names, plain numbers),
// without going through protojson.
func appendScaleRequest(dst []byte, enc wire.Encoding, i, n int) []byte {
	if enc != wire.JSON {
		data, _ := wire.Marshal(wire.Protobuf, scaleRequest(i, n))
		return append(dst, data...)
	}
	dst = append(dst, `{"client_id":"scale-client-`...)
	for d := 1_000_000; d > 1 && i < d; d /= 10 { // %07d, without fmt
		dst = append(dst, '0')
	}
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `","resource":[{"resource_id":"`+scaleResource+`","wants":`...)
	dst = strconv.AppendFloat(dst, scaleWants(i), 'f', -1, 64)
	return append(dst, "}]}"...)
}

// requestHeader is the header requests in enc are sent with: binary
// protobuf names its Content-Type; JSON, the default, goes without a
// header, as `nats req` sends it.
func requestHeader(enc wire.Encoding) nats.Header {
	if enc == wire.JSON {
		return nil
	}
	return nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}
}

// fillLeases asks for a lease as each of n clients, conc requests in
// flight, encoded in enc, encoding requests as it goes so that nothing
// but the coordinator's state stays in memory. A request refused with 503 (the
// intake's bound on newcomers in flight) is asked again after a short
// wait, as agents do; other refusals count as failures. A request left
// unanswered for lost (on a busy machine a coordinator can lose its
// leadership for a moment, and the requests it held with it) is asked
// again too, as agents do after a time-out; a late reply to the earlier
// attempt is ignored.
func fillLeases(ctx context.Context, env *Env, url, subject string, n, conc int, enc wire.Encoding, lost time.Duration) error {
	nc, err := nats.Connect(url, nats.Name("allot bench scale fill"))
	if err != nil {
		return fmt.Errorf("bench: connect: %w", err)
	}
	defer nc.Close()
	prefix := nats.NewInbox()
	var next, done, errs atomic.Int64
	finished := make(chan struct{})
	var once sync.Once
	// refusals counts error replies by code and keeps the first text of
	// each, so that a limit that refuses requests says which.
	var mu sync.Mutex
	refusals := map[string]int64{}
	why := map[string]string{}
	hdr := requestHeader(enc)
	conc = min(conc, n)
	// slots[k] is what slot k has in flight: its client, the attempt (the
	// reply subject names it) and when it was sent (zero: nothing
	// awaits a reply).
	type slotState struct {
		client, attempt int
		sent            time.Time
	}
	var smu sync.Mutex
	slots := make([]slotState, conc)
	publish := func(slot, client, attempt int) {
		data := appendScaleRequest(nil, enc, client, n)
		reply := prefix + "." + strconv.Itoa(slot) + "." + strconv.Itoa(attempt)
		if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hdr, Data: data}); err != nil {
			errs.Add(1)
		}
	}
	ask := func(slot, i int) {
		smu.Lock()
		st := &slots[slot]
		st.client, st.attempt, st.sent = i, st.attempt+1, time.Now()
		attempt := st.attempt
		smu.Unlock()
		publish(slot, i, attempt)
	}
	send := func(slot int) {
		i := int(next.Add(1) - 1)
		if i >= n {
			if done.Add(1) == int64(conc) {
				once.Do(func() { close(finished) })
			}
			return
		}
		ask(slot, i)
	}
	var retried, reasked atomic.Int64
	sub, err := nc.Subscribe(prefix+".*.*", func(m *nats.Msg) {
		tail := m.Subject[len(prefix)+1:]
		dot := strings.IndexByte(tail, '.')
		slot, _ := strconv.Atoi(tail[:dot])
		attempt, _ := strconv.Atoi(tail[dot+1:])
		smu.Lock()
		st := &slots[slot]
		if attempt != st.attempt || st.sent.IsZero() {
			smu.Unlock()
			return // a reply to an attempt asked again since
		}
		st.sent = time.Time{}
		i := st.client
		smu.Unlock()
		// A 503 of the intake, or NATS's own "no responders" (a status
		// message, not a reply: nobody serves the subject yet), is asked
		// again; counting the latter as an answer would report leases
		// nobody was given.
		unavailable := m.Header.Get("Nats-Service-Error-Code") == "503" || (len(m.Data) == 0 && m.Header.Get("Status") == "503")
		if unavailable && retried.Add(1) <= int64(100*n) {
			time.AfterFunc(10*time.Millisecond, func() { ask(slot, i) })
			return
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" || unavailable {
			if code == "" {
				code = "503 (no responders)"
			}
			errs.Add(1)
			mu.Lock()
			if refusals[code]++; why[code] == "" {
				why[code] = m.Header.Get("Nats-Service-Error")
			}
			mu.Unlock()
		}
		send(slot)
	})
	if err != nil {
		return fmt.Errorf("bench: subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	// askLost asks again for the requests unanswered for lost.
	askLost := func() {
		type again struct{ slot, client, attempt int }
		var list []again
		smu.Lock()
		for k := range slots {
			if st := &slots[k]; !st.sent.IsZero() && time.Since(st.sent) > lost {
				st.attempt, st.sent = st.attempt+1, time.Now()
				list = append(list, again{k, st.client, st.attempt})
			}
		}
		smu.Unlock()
		reasked.Add(int64(len(list)))
		for _, a := range list {
			publish(a.slot, a.client, a.attempt)
		}
	}
	for s := 0; s < conc; s++ {
		send(s)
	}
	tick := time.NewTicker(min(2*time.Second, lost/2))
	defer tick.Stop()
	progress := time.Now()
	timeout := time.After(5 * time.Minute)
	for {
		select {
		case <-finished:
			if e := errs.Load(); e > 0 {
				mu.Lock()
				defer mu.Unlock()
				codes := slices.Sorted(maps.Keys(refusals))
				parts := make([]string, len(codes))
				for k, code := range codes {
					parts[k] = fmt.Sprintf("%d with error %s (%q)", refusals[code], code, why[code])
				}
				return fmt.Errorf("bench: %d of %d lease requests failed: %s", e, n, strings.Join(parts, "; "))
			}
			return nil
		case <-tick.C:
			askLost()
			if time.Since(progress) >= 2*time.Second {
				progress = time.Now()
				env.progressf("scale: filling %d leases: %d sent, %d asked again after %v unanswered", n, min(next.Load(), int64(n)), reasked.Load(), lost)
			}
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
	last := r.Coordinator[len(r.Coordinator)-1]
	fmt.Fprintf(&b, "\n**Coordinator memory per lease: %.0f bytes at 100,000, %.0f at %d (target ≤ %d: %s); end-to-end round over 100,000: %.3f ms.**\n\n",
		r.BytesPerLease100k, last.BytesPerLease, last.Clients, TargetBytesPerLease, verdict(last.BytesPerLease > 0 && last.BytesPerLease <= TargetBytesPerLease && r.BytesPerLease100k <= TargetBytesPerLease), r.Coordinator100kMS)
	if rf := last.Refresh; rf != nil {
		o := rf.Load
		fmt.Fprintf(&b, "Closed-loop refreshes of held leases against the coordinator holding %d leases, beside the bare NATS echo answering the same requests: %d clients spread over the leases on %d connections, %d in flight each, round interval %s (as shipped); %v measured per target in %d alternating phases after %v warm-up each; both in this process.\n\n",
			last.Clients, o.Clients, o.Conns, o.Pipeline, rf.Round, o.Duration, o.Phases, o.Warmup)
		b.WriteString(targetTable(rf.Echo, rf.Coordinator))
		fmt.Fprintf(&b, "\n**Coordinator / bare echo at %d leases: throughput %.2f× (target ≥ %.1f×: %s), p99 latency %.2f× (target ≤ %.0f×: %s).**\n\n",
			last.Clients, rf.Ratio, TargetRefreshRatio, verdict(rf.Ratio >= TargetRefreshRatio), rf.P99Ratio, float64(TargetRefreshP99Ratio), verdict(rf.P99Ratio <= TargetRefreshP99Ratio))
	}
	if len(r.Rounds) > 0 {
		b.WriteString("A round of the ledger alone (in memory) in which 100 of n clients holding leases on one FAIR_SHARE resource ask again with new wants: the round's time per changed client (their requests, the record proposal, allocation, their leases; median of 5 samples), beside one alloc.Run over all n demands measured in the same run (what every round cost when shares were worked out from scratch).\n\n")
		rows = rows[:0]
		for _, p := range r.Rounds {
			rows = append(rows, []string{strconv.Itoa(p.Clients), f2(p.USPerChange), f2(p.RatioToFirst), f3(p.FullRoundMS), f0(p.ChangesPerFull)})
		}
		b.WriteString(table([]string{"clients", "µs per changed client", "÷ smallest", "full alloc.Run ms", "changes per full run"}, rows))
		b.WriteString("\n")
	}
	b.WriteString("![round cost](scale.svg)\n")
	return b.String()
}
