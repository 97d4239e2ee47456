package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// The failover benchmark: how much of what the demand allows is handed
// out, over time, after
//
//   - "leader-kill": kill -9 of the serving coordinator (one of two
//     replicas, each in its own process) with 5,000 claimants on one
//     resource;
//   - "parent-restart": a restart of the parent level's NATS server under
//     a child level (its own server, a leaf node of the parent's, and its
//     own coordinator), with the claimants at the child level.
//
// The claimants are real agents (spread over a few connections), with
// mixed demand: claimant i wants 1 + i mod 5 (15,000 for 5,000 claimants)
// against a capacity of twice their number, so the demand allows the
// whole capacity. Every sample sums what each claimant may use (its lease
// while unexpired, else its floor), capped by its wants.
const (
	foResource = "failover/resource"
	foSample   = 250 * time.Millisecond
	// foTarget is the fraction the time to target is measured to.
	foTarget = 0.9
)

// FailoverOptions configure RunFailover; zero fields take defaults.
type FailoverOptions struct {
	// Claimants is how many agents claim the resource (default 5,000).
	Claimants int `json:"claimants"`
	// Lease and Refresh are the template's lease length and refresh
	// interval (default 10 s and 2 s: production's 60 s and 5 s
	// compressed, a lease still outlasting a coordinator's failover).
	Lease   time.Duration `json:"lease_ns"`
	Refresh time.Duration `json:"refresh_ns"`
	// Down is how long the parent's NATS server stays down in
	// parent-restart (default 15 s: longer than a lease, so the child's
	// lease from its parent lapses).
	Down time.Duration `json:"down_ns"`
	// Observe is the most the run goes on after the fault (or after the
	// parent is back); it ends earlier once the fraction has stayed at
	// 90% or more for foSettled since the node answered again. Default
	// 3 minutes (a successor may learn for a floor lease, five lease
	// lengths), short 1 minute.
	Observe time.Duration `json:"observe_ns"`
}

// foSettled is how long the fraction must stay at 90% or more after the
// node answers again for a run to end before Observe.
const foSettled = 10 * time.Second

func (o *FailoverOptions) fill(short bool) {
	orDefault(&o.Claimants, 5000)
	orDefault(&o.Lease, 10*time.Second)
	orDefault(&o.Refresh, 2*time.Second)
	orDefault(&o.Down, 15*time.Second)
	if short {
		orDefault(&o.Observe, time.Minute)
	}
	orDefault(&o.Observe, 3*time.Minute)
}

// FailoverPoint is one sample: seconds from the fault, and the fraction
// handed out.
type FailoverPoint struct {
	T         float64 `json:"t_s"`
	HandedOut float64 `json:"handed_out"`
}

// FailoverRun is one scenario's outcome.
type FailoverRun struct {
	Scenario string `json:"scenario"`
	// Before is the fraction handed out just before the fault; Min the
	// lowest after it.
	Before float64 `json:"before"`
	Min    float64 `json:"min"`
	// ServiceS is when the node first answered after the fault (the
	// successor's first answer; for parent-restart, the child's first
	// answer once the parent's server is back, measured from the fault).
	ServiceS float64 `json:"service_s"`
	// BackS is when the fault ended (the parent's server restarted; 0 for
	// a kill).
	BackS float64 `json:"back_s"`
	// ToTargetS is the time from the fault until the fraction was at
	// least 90% again and stayed there (-1: not within the run; 0: it
	// never fell below).
	ToTargetS float64 `json:"to_target_s"`
	// Series is the fraction over time, one point per 250 ms.
	Series []FailoverPoint `json:"series"`
}

// FailoverResult is what RunFailover measured.
type FailoverResult struct {
	Machine Machine         `json:"machine"`
	Options FailoverOptions `json:"options"`
	Runs    []FailoverRun   `json:"runs"`
}

// RunFailover runs both failover scenarios and writes failover.json,
// failover.md and failover.csv.
func RunFailover(ctx context.Context, env *Env, o FailoverOptions) (*FailoverResult, error) {
	if env.Child == nil {
		return nil, errors.New("bench failover: the coordinators must run in child processes to be killed with kill -9 (drop --in-process)")
	}
	o.fill(env.Short)
	res := &FailoverResult{Machine: DescribeMachine(), Options: o}
	for _, run := range []func(context.Context, *Env, FailoverOptions) (*FailoverRun, error){failoverLeaderKill, failoverParentRestart} {
		r, err := run(ctx, env, o)
		if r != nil {
			res.Runs = append(res.Runs, *r)
		}
		if err != nil {
			return res, err
		}
	}
	if err := env.writeJSON("failover.json", res); err != nil {
		return res, err
	}
	if err := env.writeFile("failover.md", []byte(res.Markdown())); err != nil {
		return res, err
	}
	return res, env.writeFile("failover.csv", res.csv())
}

// claimants is the set of agents of a run and their sampler.
type claimants struct {
	conns  []*nats.Conn
	agents []*agent.Agent
	wants  float64
	cap    float64
}

// startClaimants starts n agents of node on conns connections to url.
func startClaimants(url, node string, n int, capacity float64) (*claimants, error) {
	c := &claimants{cap: capacity}
	for i := range max(n/250, 1) {
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("allot bench failover claimants %d", i)), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("bench: connect: %w", err)
		}
		c.conns = append(c.conns, nc)
	}
	log := slog.New(slog.DiscardHandler)
	for i := range n {
		w := float64(1 + i%5)
		a, err := agent.New(c.conns[i%len(c.conns)], agent.WithClientID(fmt.Sprintf("claimant-%d", i)), agent.WithNode(node), agent.WithLogger(log))
		if err == nil {
			_, err = a.Rate(foResource, agent.WithWants(w))
		}
		if err != nil {
			c.close()
			return nil, fmt.Errorf("bench: claimant %d: %w", i, err)
		}
		c.agents = append(c.agents, a)
		c.wants += w
	}
	return c, nil
}

func (c *claimants) close() {
	var wg sync.WaitGroup
	for _, a := range c.agents {
		wg.Go(func() { _ = a.Close() })
	}
	wg.Wait()
	for _, nc := range c.conns {
		nc.Close()
	}
}

// handedOut is what the claimants may use now, each capped by its wants,
// over what the demand allows.
func (c *claimants) handedOut() float64 {
	used := 0.0
	for _, a := range c.agents {
		for _, st := range a.Status() {
			if st.ResourceID == foResource {
				used += min(st.Capacity, st.Wants)
			}
		}
	}
	return used / min(c.cap, c.wants)
}

// record samples the claimants every foSample from zero until ctx ends.
type record struct {
	mu     sync.Mutex
	zero   time.Time
	points []FailoverPoint
}

func (r *record) run(ctx context.Context, c *claimants) {
	t := time.NewTicker(foSample)
	defer t.Stop()
	for {
		f := c.handedOut()
		r.mu.Lock()
		r.points = append(r.points, FailoverPoint{T: time.Since(r.zero).Seconds(), HandedOut: f}) // zero read under the lock: setZero moves it
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// last returns the latest fraction sampled.
func (r *record) last() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.points) == 0 {
		return 0
	}
	return r.points[len(r.points)-1].HandedOut
}

// outcome fills the run's figures from the points, with the fault at
// zero.
func (r *record) outcome(run *FailoverRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run.Min = math.Inf(1)
	run.ToTargetS = 0
	for _, p := range r.points {
		if p.T < 0 {
			run.Before = p.HandedOut
			continue
		}
		run.Series = append(run.Series, p)
		run.Min = min(run.Min, p.HandedOut)
		if p.HandedOut < foTarget {
			run.ToTargetS = -1 // below: wait for the next point at or above
		} else if run.ToTargetS < 0 {
			run.ToTargetS = p.T
		}
	}
	if math.IsInf(run.Min, 1) {
		run.Min = 0
	}
}

// settle waits until the fraction has been at least foTarget for
// foSettled after since, or until deadline.
func (r *record) settle(ctx context.Context, since, deadline time.Time) {
	for time.Now().Before(deadline) {
		r.mu.Lock()
		from := since.Sub(r.zero).Seconds()
		ok, start := false, math.Inf(1)
		for _, p := range r.points {
			if p.T < from {
				continue
			}
			if p.HandedOut < foTarget {
				start = math.Inf(1)
			} else if math.IsInf(start, 1) {
				start = p.T
			}
		}
		if last := len(r.points); last > 0 && !math.IsInf(start, 1) {
			ok = r.points[last-1].T-start >= foSettled.Seconds()
		}
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(foSample):
		}
	}
}

// waitFraction waits until the fraction sampled is at least f.
func waitFraction(ctx context.Context, r *record, f float64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for r.last() < f {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the claimants hold %.3f of what they may after %v, want %.2f", r.last(), within, f)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(foSample):
		}
	}
	return nil
}

// probeNode returns when a GetCapacity of node is first answered after
// since (polling nc), or an error once ctx ends.
func probeNode(ctx context.Context, nc *nats.Conn, node string) (time.Time, error) {
	req, _ := protojson.Marshal(&allotpb.GetCapacityRequest{ClientId: "failover-probe",
		Resource: []*allotpb.ResourceRequest{{ResourceId: "failover/probe", Wants: 0}}})
	for {
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		m, err := nc.RequestWithContext(rctx, coordinator.Subject(node, "capacity.get"), req)
		cancel()
		if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("bench: node %s never answered: %w", node, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// failoverLeaderKill kills the serving replica of two with kill -9.
func failoverLeaderKill(ctx context.Context, env *Env, o FailoverOptions) (*FailoverRun, error) {
	run := &FailoverRun{Scenario: "leader-kill"}
	env.progressf("failover leader-kill: %d claimants, lease %v, refresh %v", o.Claimants, o.Lease, o.Refresh)
	srv, shutdown, err := startServer()
	if err != nil {
		return nil, err
	}
	defer shutdown()
	url := srv.ClientURL()
	capacity := 2 * float64(o.Claimants)
	args := func(id string) []string {
		return []string{"--id", id, "--capacity", fmt.Sprint(capacity), "--lease", o.Lease.String(), "--refresh", o.Refresh.String()}
	}
	reps := map[string]*helper{}
	for _, id := range []string{"r1", "r2"} {
		h, err := env.startHelper(ctx, RoleReplica, url, args(id))
		if err != nil {
			return nil, err
		}
		reps[id] = h
		defer func() { _ = h.stop() }()
	}
	nc, rec, stop, err := steady(ctx, url, coordinator.DefaultNode, o, capacity)
	if err != nil {
		return nil, err
	}
	defer stop()
	lead, err := electionLeader(ctx, nc, coordinator.DefaultNode)
	if err != nil {
		return nil, err
	}
	h := reps[lead]
	if h == nil {
		return nil, fmt.Errorf("bench: the leader %q is not one of the replicas", lead)
	}
	fault := time.Now()
	rec.setZero(fault)
	if err := h.kill(); err != nil {
		return nil, fmt.Errorf("bench: kill -9 the leader: %w", err)
	}
	env.progressf("failover leader-kill: killed %s", lead)
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	service, err := probeNode(pctx, nc, coordinator.DefaultNode)
	cancel()
	if err != nil {
		return run, err
	}
	run.ServiceS = service.Sub(fault).Seconds()
	rec.settle(ctx, service, fault.Add(o.Observe))
	stop()
	rec.outcome(run)
	env.progressf("failover leader-kill: service after %.1fs, lowest %.3f, %.0f%% again after %.1fs", run.ServiceS, run.Min, 100*foTarget, run.ToTargetS)
	return run, nil
}

// steady starts the claimants of node at url and its sampler, waits
// until they hold all they may and a refresh interval more (the steady
// state before the fault, in the series), and returns a connection for
// probes; stop ends the sampler and the claimants and closes it.
func steady(ctx context.Context, url, node string, o FailoverOptions, capacity float64) (nc *nats.Conn, rec *record, stop func(), err error) {
	nc, err = nats.Connect(url, nats.Name("allot bench failover probe"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bench: connect: %w", err)
	}
	rec, stopRec, err := startRecord(ctx, url, node, o, capacity)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	stop = func() { stopRec(); nc.Close() }
	if err := waitFraction(ctx, rec, 0.99, 2*time.Minute); err != nil {
		stop()
		return nil, nil, nil, err
	}
	time.Sleep(o.Refresh)
	return nc, rec, stop, nil
}

// startRecord starts the claimants of node at url and samples them.
func startRecord(ctx context.Context, url, node string, o FailoverOptions, capacity float64) (*record, func(), error) {
	c, err := startClaimants(url, node, o.Claimants, capacity)
	if err != nil {
		return nil, nil, err
	}
	rec := &record{zero: time.Now()}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); rec.run(rctx, c) }()
	var once sync.Once
	return rec, func() {
		once.Do(func() {
			cancel()
			<-done
			c.close()
		})
	}, nil
}

// setZero moves the series' zero to t, the fault: earlier points get
// negative times.
func (r *record) setZero(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	shift := t.Sub(r.zero).Seconds()
	for i := range r.points {
		r.points[i].T -= shift
	}
	r.zero = t
}

// electionLeader returns the id of the replica that holds node's
// election key.
func electionLeader(ctx context.Context, nc *nats.Conn, node string) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	kv, err := js.KeyValue(ctx, election.DefaultBucket)
	if err != nil {
		return "", fmt.Errorf("bench: election bucket: %w", err)
	}
	e, err := kv.Get(ctx, node)
	if err != nil {
		return "", fmt.Errorf("bench: election key %s: %w", node, err)
	}
	var v election.Value
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return "", fmt.Errorf("bench: election key %s: %w", node, err)
	}
	return v.ID, nil
}

// restartable is an embedded nats-server that can be stopped and started
// again on the same ports and store.
type restartable struct {
	opts embed.Options
	srv  *server.Server
}

func (r *restartable) start() error {
	s, err := embed.Start(r.opts)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.srv = s
	return nil
}

func (r *restartable) stop() {
	if r.srv != nil {
		r.srv.Shutdown()
		r.srv.WaitForShutdown()
		r.srv = nil
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// failoverParentRestart restarts the parent level's server under a child
// level whose claimants are measured.
func failoverParentRestart(ctx context.Context, env *Env, o FailoverOptions) (*FailoverRun, error) {
	run := &FailoverRun{Scenario: "parent-restart"}
	env.progressf("failover parent-restart: %d claimants at the child level, the parent's server down %v", o.Claimants, o.Down)
	log := env.logger()
	dir, err := os.MkdirTemp("", "allot-bench-failover-*")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	leafPort, err := freePort()
	if err != nil {
		return nil, err
	}
	parent := &restartable{opts: embed.Options{Port: port, LeafNodePort: leafPort, StoreDir: dir + "/root", ServerName: "root", Domain: "root"}}
	if err := parent.start(); err != nil {
		return nil, err
	}
	defer parent.stop()
	child, err := embed.Start(embed.Options{StoreDir: dir + "/eu", ServerName: "eu", Domain: "eu",
		LeafRemotes: []string{fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort)}})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer func() { child.Shutdown(); child.WaitForShutdown() }()
	if err := waitLeaf(child, "eu"); err != nil {
		return nil, err
	}
	capacity := 2 * float64(o.Claimants)
	tmpls := sources.StaticTemplates(config.NewSet(1, nil, benchTemplate(capacity, o.Lease, o.Refresh)))
	reconnect := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	root, err := startReplica(ctx, parent.srv.ClientURL(), coordinator.Options{ServerID: "root-1", Templates: tmpls, Logger: log}, reconnect...)
	if err != nil {
		return nil, err
	}
	defer root.stop()
	eu, err := startReplica(ctx, child.ClientURL(), coordinator.Options{Node: "eu", Parent: coordinator.DefaultNode, ServerID: "eu-1", Templates: tmpls, Logger: log}, reconnect...)
	if err != nil {
		return nil, err
	}
	defer eu.stop()
	nc, rec, stop, err := steady(ctx, child.ClientURL(), "eu", o, capacity)
	if err != nil {
		return nil, err
	}
	defer stop()
	fault := time.Now()
	rec.setZero(fault)
	parent.stop()
	env.progressf("failover parent-restart: the parent's server is down")
	time.Sleep(o.Down)
	if err := parent.start(); err != nil {
		return run, err
	}
	back := time.Now()
	run.BackS = back.Sub(fault).Seconds()
	env.progressf("failover parent-restart: the parent's server is back")
	if err := waitLeaf(child, "eu"); err != nil {
		return run, err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	service, err := probeNode(pctx, nc, "eu")
	cancel()
	if err != nil {
		return run, err
	}
	run.ServiceS = service.Sub(fault).Seconds()
	rec.settle(ctx, service, back.Add(o.Observe))
	stop()
	rec.outcome(run)
	env.progressf("failover parent-restart: lowest %.3f, %.0f%% again %.1fs after the fault (%.1fs after the parent was back)", run.Min, 100*foTarget, run.ToTargetS, run.ToTargetS-run.BackS)
	return run, nil
}

// Markdown reports the runs: the headline figures and the time series
// every second.
func (r *FailoverResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Failover: fraction handed out over time\n\n%s\n", r.Machine.Markdown())
	fmt.Fprintf(&b, "%d claimants on one resource (claimant i wants 1 + i mod 5; capacity %d), lease %v, refresh %v; parent's server down %v.\n\n",
		r.Options.Claimants, 2*r.Options.Claimants, r.Options.Lease, r.Options.Refresh, r.Options.Down)
	rows := [][]string{}
	for _, run := range r.Runs {
		to := "not within the run"
		if run.ToTargetS >= 0 {
			to = f1(run.ToTargetS) + " s"
		}
		rows = append(rows, []string{run.Scenario, f3(run.Before), f3(run.Min), f1(run.BackS) + " s", f1(run.ServiceS) + " s", to})
	}
	b.WriteString(table([]string{"scenario", "before", "lowest", "fault over", "node answers", "≥ 90% again (from the fault)"}, rows))
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "\n%s, fraction handed out each second from the fault:\n\n```\n", run.Scenario)
		next := 0.0
		for _, p := range run.Series {
			if p.T+1e-9 < next {
				continue
			}
			fmt.Fprintf(&b, "%5.1f s  %.3f\n", p.T, p.HandedOut)
			next = math.Floor(p.T) + 1
		}
		b.WriteString("```\n")
	}
	return b.String()
}

// csv is every run's series: scenario, seconds from the fault, fraction.
func (r *FailoverResult) csv() []byte {
	var b strings.Builder
	b.WriteString("scenario,t_s,handed_out\n")
	for _, run := range r.Runs {
		for _, p := range run.Series {
			fmt.Fprintf(&b, "%s,%.3f,%.4f\n", run.Scenario, p.T, p.HandedOut)
		}
	}
	return []byte(b.String())
}
