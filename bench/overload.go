package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// OverloadOptions configure the overload benchmark. Zero fields take the
// defaults of DefaultOverloadOptions.
type OverloadOptions struct {
	// Baseline is how long the good clients run alone, Flood how long
	// the flood runs beside them, After how long they run after it.
	Baseline time.Duration `json:"baseline"`
	Flood    time.Duration `json:"flood"`
	After    time.Duration `json:"after"`
	// GoodClients share one resource of Capacity, each wanting twice its
	// fair share, with leases of Lease refreshed every Refresh.
	GoodClients int           `json:"good_clients"`
	Capacity    float64       `json:"capacity"`
	Lease       time.Duration `json:"lease"`
	Refresh     time.Duration `json:"refresh"`
	// Timeout is every client's request time-out (sent as Allot-Timeout).
	Timeout time.Duration `json:"timeout"`
	// FloodConns connections send small capacity.get requests from
	// FloodIDs client ids as fast as the generator can; BigPerSecond
	// requests a second name 1,000 resources each.
	FloodConns   int `json:"flood_conns"`
	FloodIDs     int `json:"flood_ids"`
	BigPerSecond int `json:"big_per_second"`
	// MaxInFlight is the replica's intake bound (0: its default).
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// DefaultOverloadOptions are the options of a full run; short runs
// shorten the phases.
func DefaultOverloadOptions(short bool) OverloadOptions {
	o := OverloadOptions{Baseline: 10 * time.Second, Flood: 20 * time.Second, After: 5 * time.Second,
		GoodClients: 20, Capacity: 100, Lease: 6 * time.Second, Refresh: time.Second, Timeout: 2 * time.Second,
		FloodConns: 4, FloodIDs: 20000, BigPerSecond: 10}
	if short {
		o.Baseline, o.Flood, o.After = 5*time.Second, 10*time.Second, 4*time.Second
	}
	return o
}

func (o *OverloadOptions) fill(short bool) {
	d := DefaultOverloadOptions(short)
	orDefault(&o.Baseline, d.Baseline)
	orDefault(&o.Flood, d.Flood)
	orDefault(&o.After, d.After)
	orDefault(&o.GoodClients, d.GoodClients)
	orDefault(&o.Capacity, d.Capacity)
	orDefault(&o.Lease, d.Lease)
	orDefault(&o.Refresh, d.Refresh)
	orDefault(&o.Timeout, d.Timeout)
	orDefault(&o.FloodConns, d.FloodConns)
	orDefault(&o.FloodIDs, d.FloodIDs)
	orDefault(&o.BigPerSecond, d.BigPerSecond)
}

// Targets of the overload benchmark.
const (
	// TargetOverloadP99Ratio bounds the good clients' refresh p99 under
	// the flood over their unloaded p99.
	TargetOverloadP99Ratio = 10
	// TargetRecoveryShare of the capacity must be held by the good
	// clients within TargetRecovery after the flood.
	TargetRecoveryShare = 0.95
	TargetRecovery      = 2 * time.Second
)

// OverloadResult is the outcome of RunOverload.
type OverloadResult struct {
	Machine Machine         `json:"machine"`
	Options OverloadOptions `json:"options"`
	// Terms are the coordinator terms the good clients saw, in order;
	// TermUnchanged says there was one.
	Terms         []uint64 `json:"terms"`
	TermUnchanged bool     `json:"term_unchanged"`
	// Lapses counts good clients' leases that ended before a refresh
	// renewed them.
	Lapses int64 `json:"lapses"`
	// Baseline and Flooded are the good clients' refreshes before and
	// during the flood.
	Baseline GoodPhase `json:"baseline"`
	Flooded  GoodPhase `json:"flooded"`
	After    GoodPhase `json:"after"`
	P99Ratio float64   `json:"p99_ratio"`
	// Flood is what the flood got back.
	Flood FloodCounts `json:"flood"`
	// HeldAtFloodEnd is the capacity the good clients held when the flood
	// ended; RecoverySeconds how long after it they held
	// TargetRecoveryShare of it (-1: not within the After phase).
	HeldAtFloodEnd  float64 `json:"held_at_flood_end"`
	RecoverySeconds float64 `json:"recovery_seconds"`
	// Stats is the coordinator's STATS at the end.
	Stats *coordinator.Stats `json:"stats,omitempty"`
}

// GoodPhase is the good clients' refreshes in one phase.
type GoodPhase struct {
	Refreshes int64   `json:"refreshes"`
	Answered  int64   `json:"answered"`
	Refused   int64   `json:"refused"`
	TimedOut  int64   `json:"timed_out"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// FloodCounts is what the flood's requests got.
type FloodCounts struct {
	Sent int64   `json:"sent"`
	Rate float64 `json:"per_second"`
	// OK were answered with leases, Refused with 503, Limited with 429,
	// OtherErrors with any other error; Unanswered got nothing by the
	// end of the time-out after the flood.
	OK          int64 `json:"ok"`
	Refused     int64 `json:"refused_503"`
	Limited     int64 `json:"limited_429"`
	OtherErrors int64 `json:"other_errors"`
	Unanswered  int64 `json:"unanswered"`
	// OKWithinTimeout is the share of OK answers that came within the
	// senders' time-out.
	OKWithinTimeout float64 `json:"ok_within_timeout"`
}

// Met reports whether every target was met.
func (r *OverloadResult) Met() bool {
	return r.TermUnchanged && r.Lapses == 0 && r.P99Ratio <= TargetOverloadP99Ratio && r.Flood.Unanswered == 0 &&
		r.RecoverySeconds >= 0 && r.RecoverySeconds <= TargetRecovery.Seconds()
}

// Markdown renders the result.
func (r *OverloadResult) Markdown() string {
	phase := func(name string, p GoodPhase) []string {
		return []string{name, strconv.FormatInt(p.Refreshes, 10), strconv.FormatInt(p.Answered, 10), strconv.FormatInt(p.Refused, 10),
			strconv.FormatInt(p.TimedOut, 10), f1(p.P50ms), f1(p.P99ms), f1(p.MaxMs)}
	}
	fl := r.Flood
	s := "## Overload\n\n" + r.Machine.Markdown() + "\n\n" +
		fmt.Sprintf("%d good clients share a capacity of %v (leases %v, refreshed every %v, time-out %v); a flood of small capacity.get from %d ids on %d connections, at the highest rate the generator reaches, plus %d requests/s of 1,000 resources, for %v after a baseline of %v.\n\n",
			r.Options.GoodClients, r.Options.Capacity, r.Options.Lease, r.Options.Refresh, r.Options.Timeout, r.Options.FloodIDs, r.Options.FloodConns,
			r.Options.BigPerSecond, r.Options.Flood, r.Options.Baseline) +
		table([]string{"good clients", "refreshes", "answered", "503", "timed out", "p50 ms", "p99 ms", "max ms"},
			[][]string{phase("unloaded", r.Baseline), phase("flood", r.Flooded), phase("after", r.After)}) + "\n" +
		table([]string{"flood", "sent", "per s", "leases", "503", "429", "other errors", "unanswered", "leases within time-out"},
			[][]string{{"requests", strconv.FormatInt(fl.Sent, 10), f0(fl.Rate), strconv.FormatInt(fl.OK, 10), strconv.FormatInt(fl.Refused, 10),
				strconv.FormatInt(fl.Limited, 10), strconv.FormatInt(fl.OtherErrors, 10), strconv.FormatInt(fl.Unanswered, 10), f3(fl.OKWithinTimeout)}}) + "\n" +
		table([]string{"target", "measured", "verdict"}, [][]string{
			{"leader term unchanged", fmt.Sprint(r.Terms), verdict(r.TermUnchanged)},
			{"good clients' leases lapsed: 0", strconv.FormatInt(r.Lapses, 10), verdict(r.Lapses == 0)},
			{fmt.Sprintf("refresh p99 under flood ÷ unloaded ≤ %d", TargetOverloadP99Ratio), f2(r.P99Ratio), verdict(r.P99Ratio <= TargetOverloadP99Ratio)},
			{"flood requests unanswered: 0", strconv.FormatInt(fl.Unanswered, 10), verdict(fl.Unanswered == 0)},
			{fmt.Sprintf("good clients hold %.0f%% of capacity within %v after the flood", 100*TargetRecoveryShare, TargetRecovery),
				fmt.Sprintf("%.2fs (held %.1f at the flood's end)", r.RecoverySeconds, r.HeldAtFloodEnd),
				verdict(r.RecoverySeconds >= 0 && r.RecoverySeconds <= TargetRecovery.Seconds())},
		})
	if st := r.Stats; st != nil {
		s += fmt.Sprintf("\nCoordinator intake: %+v; rounds %d, max round %.1f ms.\n", st.Intake, st.Rounds, st.MaxRoundMS)
	}
	return s
}

// RunOverload runs an elected coordinator replica (a child process unless
// in-process), good clients that hold leases, and then a flood beside
// them, and reports whether the leader survived it.
func RunOverload(ctx context.Context, env *Env, o OverloadOptions) (*OverloadResult, error) {
	o.fill(env.Short)
	res := &OverloadResult{Machine: DescribeMachine(), Options: o}
	srv, shutdown, err := startServer()
	if err != nil {
		return nil, err
	}
	defer shutdown()
	url := srv.ClientURL()
	rep, err := env.startHelper(ctx, RoleReplica, url, []string{"--await-lead", "--round", "5ms", "--capacity", strconv.FormatFloat(o.Capacity, 'g', -1, 64),
		"--lease", o.Lease.String(), "--refresh", o.Refresh.String(), "--max-in-flight", strconv.Itoa(o.MaxInFlight)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = rep.stop() }()

	good := &goodClients{o: o, terms: map[uint64]bool{}}
	goodNC, err := nats.Connect(url, nats.Name("allot bench good clients"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer goodNC.Close()
	gctx, stopGood := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range o.GoodClients {
		wg.Go(func() { good.run(gctx, goodNC, i) })
	}
	defer func() { stopGood(); wg.Wait() }()

	env.progressf("overload: baseline, %v", o.Baseline)
	good.setPhase(0)
	if err := sleepCtx(ctx, o.Baseline); err != nil {
		return nil, err
	}
	env.progressf("overload: flood, %v", o.Flood)
	good.setPhase(1)
	// The flood runs in a process of its own, as it would elsewhere: in
	// this one it would starve the good clients and the NATS server of
	// the Go scheduler's time, which no coordinator can help.
	fl, err := env.startHelper(ctx, RoleFlood, url, []string{"--conns", strconv.Itoa(o.FloodConns), "--ids", strconv.Itoa(o.FloodIDs),
		"--big", strconv.Itoa(o.BigPerSecond), "--timeout", o.Timeout.String()})
	if err != nil {
		return nil, err
	}
	floodStart := time.Now()
	if err := sleepCtx(ctx, o.Flood); err != nil {
		_ = fl.stop()
		return nil, err
	}
	// Stopping it ends its sending at once; it then waits out its
	// requests' time-out for their answers, while the good clients
	// recover.
	stopped := make(chan error, 1)
	go func() { stopped <- fl.stop() }()
	floodEnd := time.Now()
	res.HeldAtFloodEnd = good.held(floodEnd)
	good.setPhase(2)
	env.progressf("overload: after the flood, %v", o.After)
	res.RecoverySeconds = -1
	for end := floodEnd.Add(o.After); time.Now().Before(end); {
		now := time.Now()
		if good.held(now) >= TargetRecoveryShare*o.Capacity && res.RecoverySeconds < 0 {
			res.RecoverySeconds = now.Sub(floodEnd).Seconds()
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if err := <-stopped; err != nil {
		return nil, fmt.Errorf("bench: flood: %w: %s", err, fl.output.String())
	}
	counts, err := floodCountsOf(fl.output.String())
	if err != nil {
		return nil, err
	}
	res.Flood = counts
	res.Flood.Rate = float64(counts.Sent) / floodEnd.Sub(floodStart).Seconds()
	stopGood()
	wg.Wait()
	res.Baseline, res.Flooded, res.After = good.phase(0), good.phase(1), good.phase(2)
	if res.Baseline.P99ms > 0 {
		res.P99Ratio = res.Flooded.P99ms / res.Baseline.P99ms
	}
	res.Lapses = good.lapses.Load()
	res.Terms = good.termList()
	res.TermUnchanged = len(res.Terms) == 1
	if st, err := fetchStats(goodNC); err == nil {
		res.Stats = st
	}
	if err := env.writeJSON("overload.json", res); err != nil {
		return res, err
	}
	return res, env.writeFile("overload.md", []byte(res.Markdown()))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// goodClients behave like agents: each refreshes its lease of resource
// "good" every refresh interval, says its time-out and, holding a lease,
// its id, on capacity.refresh, and waits what a 503 or 429 tells before
// it tries again.
type goodClients struct {
	o      OverloadOptions
	cur    atomic.Int32 // the phase
	lapses atomic.Int64

	mu     sync.Mutex
	lat    [3][]time.Duration
	counts [3]GoodPhase
	leases map[int]lease
	terms  map[uint64]bool
	order  []uint64
}

type lease struct {
	capacity float64
	expiry   time.Time
}

func (g *goodClients) setPhase(p int) { g.cur.Store(int32(p)) }

func (g *goodClients) run(ctx context.Context, nc *nats.Conn, i int) {
	id := "good-" + strconv.Itoa(i)
	wants := 2 * g.o.Capacity / float64(g.o.GoodClients)
	var has *allotpb.Lease
	var expiry time.Time
	lapsed := false
	for ctx.Err() == nil {
		if !expiry.IsZero() && time.Now().After(expiry) && !lapsed {
			lapsed = true
			g.lapses.Add(1)
		}
		req := &allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{{ResourceId: "good", Wants: wants, Has: has}}}
		data, _ := proto.Marshal(req)
		m := nats.NewMsg(coordinator.Subject(coordinator.DefaultNode, "capacity.get"))
		m.Data = data
		m.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
		m.Header.Set(wire.HeaderTimeout, strconv.FormatInt(g.o.Timeout.Milliseconds(), 10))
		if has != nil {
			m.Subject = coordinator.Subject(coordinator.DefaultNode, "capacity.refresh")
			m.Header.Set(wire.HeaderClient, id)
		}
		phase := g.cur.Load()
		start := time.Now()
		reply, err := nc.RequestMsg(m, g.o.Timeout)
		took := time.Since(start)
		wait := g.o.Refresh
		g.mu.Lock()
		c := &g.counts[phase]
		c.Refreshes++
		var resp allotpb.GetCapacityResponse
		switch {
		case err != nil:
			c.TimedOut++
			wait = 100 * time.Millisecond
		case reply.Header.Get(micro.ErrorCodeHeader) != "":
			c.Refused++
			ms, _ := strconv.Atoi(reply.Header.Get(wire.HeaderRetryAfter))
			wait = max(time.Duration(ms)*time.Millisecond, 50*time.Millisecond)
		case proto.Unmarshal(reply.Data, &resp) == nil && len(resp.GetResponse()) == 1 && resp.GetResponse()[0].GetGets() != nil:
			c.Answered++
			g.lat[phase] = append(g.lat[phase], took)
			if t := resp.GetTerm(); !g.terms[t] {
				g.terms[t] = true
				g.order = append(g.order, t)
			}
			has = resp.GetResponse()[0].GetGets()
			expiry, lapsed = has.GetExpiryTime().AsTime(), false
			if g.leases == nil {
				g.leases = map[int]lease{}
			}
			g.leases[i] = lease{has.GetCapacity(), expiry}
			if ri := has.GetRefreshInterval().AsDuration(); ri > 0 {
				wait = ri
			}
		default:
			c.Refused++
		}
		g.mu.Unlock()
		_ = sleepCtx(ctx, wait)
	}
}

// held is the capacity the good clients hold at now.
func (g *goodClients) held(now time.Time) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sum float64
	for _, l := range g.leases {
		if now.Before(l.expiry) {
			sum += l.capacity
		}
	}
	return sum
}

func (g *goodClients) phase(p int) GoodPhase {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.counts[p]
	l := slices.Clone(g.lat[p])
	slices.Sort(l)
	if n := len(l); n > 0 {
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		c.P50ms, c.P99ms, c.MaxMs = ms(l[n/2]), ms(l[min(n-1, n*99/100)]), ms(l[n-1])
	}
	return c
}

func (g *goodClients) termList() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.order)
}

// flood sends capacity.get requests as fast as its connections take them
// and counts what comes back.
type flood struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*nats.Conn

	sent, ok, okLate, refused, limited, other atomic.Int64
}

func startFlood(ctx context.Context, url string, o OverloadOptions) (*flood, error) {
	fctx, cancel := context.WithCancel(ctx)
	f := &flood{cancel: cancel}
	hdr := nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}, wire.HeaderTimeout: {strconv.FormatInt(o.Timeout.Milliseconds(), 10)}}
	for c := range o.FloodConns + 1 {
		nc, err := nats.Connect(url, nats.Name("allot bench flood"))
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("bench: connect: %w", err)
		}
		f.conns = append(f.conns, nc)
		prefix := "_FLOOD." + strconv.Itoa(c) + "."
		sent := sync.Map{} // reply subject → send time, for the time-out share
		sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
			at, _ := sent.LoadAndDelete(m.Subject)
			switch m.Header.Get(micro.ErrorCodeHeader) {
			case "":
				f.ok.Add(1)
				if t, ok := at.(time.Time); ok && time.Since(t) > o.Timeout {
					f.okLate.Add(1)
				}
			case "503":
				f.refused.Add(1)
			case "429":
				f.limited.Add(1)
			default:
				f.other.Add(1)
			}
		})
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("bench: flood subscribe: %w", err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		subject := coordinator.Subject(coordinator.DefaultNode, "capacity.get")
		send := func(n int, body []byte) {
			reply := prefix + strconv.Itoa(n)
			sent.Store(reply, time.Now())
			if nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hdr, Data: body}) == nil {
				f.sent.Add(1)
			}
		}
		if c == o.FloodConns {
			// The large requests: 1,000 resources each, paced.
			f.wg.Go(func() {
				rs := make([]*allotpb.ResourceRequest, wire.MaxResourcesPerReq)
				for k := range rs {
					rs[k] = &allotpb.ResourceRequest{ResourceId: "big-" + strconv.Itoa(k), Wants: 1}
				}
				tk := time.NewTicker(time.Second / time.Duration(o.BigPerSecond))
				defer tk.Stop()
				for n := 0; ; n++ {
					select {
					case <-fctx.Done():
						return
					case <-tk.C:
					}
					body, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: "big-" + strconv.Itoa(n), Resource: rs})
					send(n, body)
				}
			})
			continue
		}
		f.wg.Go(func() {
			for n := 0; fctx.Err() == nil; n++ {
				id := "flood-" + strconv.Itoa((n*o.FloodConns+c)%o.FloodIDs)
				body, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: id,
					Resource: []*allotpb.ResourceRequest{{ResourceId: "flood-" + strconv.Itoa(n%64), Wants: 1}}})
				send(n, body)
				if n%256 == 255 {
					// What the server has taken paces the generator.
					_ = nc.Flush()
				}
			}
		})
	}
	return f, nil
}

func (f *flood) stop() {
	f.cancel()
	f.wg.Wait()
}

func (f *flood) counts() FloodCounts {
	c := FloodCounts{Sent: f.sent.Load(), OK: f.ok.Load(), Refused: f.refused.Load(), Limited: f.limited.Load(), OtherErrors: f.other.Load()}
	for _, nc := range f.conns {
		nc.Close()
	}
	c.Unanswered = c.Sent - c.OK - c.Refused - c.Limited - c.OtherErrors
	if c.OK > 0 {
		c.OKWithinTimeout = 1 - float64(f.okLate.Load())/float64(c.OK)
	}
	return c
}

// floodCountsPrefix starts the line on which the flood helper reports.
const floodCountsPrefix = "flood-counts: "

// runFloodChild floods until ctx ends, waits out its requests' time-out
// and a second for their answers, and reports what they got on stderr.
func runFloodChild(ctx context.Context, url string, o OverloadOptions, stdout, stderr io.Writer) error {
	f, err := startFlood(ctx, url, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ready")
	<-ctx.Done()
	f.stop()
	time.Sleep(o.Timeout + time.Second)
	b, err := json.Marshal(f.counts())
	if err != nil {
		return fmt.Errorf("bench: flood counts: %w", err)
	}
	fmt.Fprintln(stderr, floodCountsPrefix+string(b))
	return nil
}

// floodCountsOf finds the flood helper's report in its output.
func floodCountsOf(out string) (FloodCounts, error) {
	var c FloodCounts
	i := strings.LastIndex(out, floodCountsPrefix)
	if i < 0 {
		return c, fmt.Errorf("bench: the flood helper reported nothing: %s", out)
	}
	line, _, _ := strings.Cut(out[i+len(floodCountsPrefix):], "\n")
	if err := json.Unmarshal([]byte(line), &c); err != nil {
		return c, fmt.Errorf("bench: flood counts %q: %w", line, err)
	}
	return c, nil
}
