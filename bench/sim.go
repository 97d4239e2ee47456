package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/alloc"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/replica"
)

// Simulation parameters: Doorman's first scenario (capacity 500, five
// clients wanting about 100) with time compressed about 15×: leases are
// refreshed every 300 ms instead of 5 s. The election TTL (whole seconds)
// cannot be compressed, so leases are 10 s: a lease must outlast a
// failover (TTL + about 1 s) for clients to keep working through it, as
// 60 s leases do in a real deployment.
const (
	simCapacity    = 500.0
	simRefresh     = 300 * time.Millisecond
	simLease       = 10 * time.Second
	simSample      = 50 * time.Millisecond
	simStep        = time.Second // random-walk step of the wants
	simResource    = "sim/resource"
	simWarmup      = 2 * time.Second // startup excluded from averages
	simOverTol     = 1e-9            // relative tolerance for overshoot
	simConvergeTol = 0.05            // Σ|has-fair| ≤ 5% of capacity
)

// TargetUtilization is the average share of min(capacity, wants) that must
// be handed out: capacity left unused while someone wants it is the
// cost of the protocol, and it must stay small. Doorman's three-level scenario 7 reached 0.966,
// in a different experiment (see bench/README.md).
const TargetUtilization = 0.99

// SimEvent is a scripted change in a scenario.
type SimEvent struct {
	At      time.Duration `json:"at_ns"`
	What    string        `json:"what"` // join, leave, spike, unspike, leader-lost, leader-back
	Clients []int         `json:"clients,omitempty"`
	Factor  float64       `json:"factor,omitempty"`
	Wants   float64       `json:"wants,omitempty"`
}

// SimScenario describes one simulation run.
type SimScenario struct {
	Key      string        `json:"key"`
	Title    string        `json:"title"`
	Duration time.Duration `json:"duration_ns"`
	Clients  int           `json:"initial_clients"`
	Wants    float64       `json:"initial_wants"`
	Events   []SimEvent    `json:"events"`
	Seed     uint64        `json:"seed"`
	// Replicas runs two coordinator.Replica in an election instead of one
	// coordinator; "leader-lost" then kills the leader abruptly and the
	// follower takes over by itself.
	Replicas bool `json:"replicas,omitempty"`
}

// Scenarios returns the three scenarios after Doorman's: steady random
// walk (a), leader lost then replaced (b), and joins, leaves and spikes (c).
func Scenarios(short bool) []SimScenario {
	d := func(full, s time.Duration) time.Duration {
		if short {
			return s
		}
		return full
	}
	a := SimScenario{Key: "a", Title: "5 clients, capacity 500, wants ~100 each on a random walk",
		Duration: d(60*time.Second, 20*time.Second), Clients: 5, Wants: 100, Seed: 1}
	bd := d(60*time.Second, 25*time.Second)
	b := SimScenario{Key: "b", Title: "as (a) with two elected replicas; the leader is lost abruptly and the follower takes over",
		Duration: bd, Clients: 5, Wants: 100, Seed: 2, Replicas: true, Events: []SimEvent{
			{At: bd * 3 / 10, What: "leader-lost"},
		}}
	cd := d(90*time.Second, 30*time.Second)
	c := SimScenario{Key: "c", Title: "clients join and leave; two clients spike to 10× their demand",
		Duration: cd, Clients: 5, Wants: 100, Seed: 3, Events: []SimEvent{
			{At: cd * 2 / 10, What: "join", Clients: []int{5, 6, 7}, Wants: 60},
			{At: cd * 4 / 10, What: "leave", Clients: []int{1, 6}},
			{At: cd * 6 / 10, What: "spike", Clients: []int{0, 2}, Factor: 10},
			{At: cd * 8 / 10, What: "unspike", Clients: []int{0, 2}},
		}}
	return []SimScenario{a, b, c}
}

// Shift is a scripted change and how long the allocation took to settle.
type Shift struct {
	What string  `json:"what"`
	AtS  float64 `json:"at_s"`
	// ReconvergeS is the time from the shift until the first sample where
	// the handed-out capacity is within 1% of min(capacity, wants) and the
	// allocation is within 5% of capacity of the fair shares; -1 if that
	// did not happen before the next shift or the end.
	ReconvergeS float64 `json:"reconverge_s"`
}

// SimOutcome is the result of one scenario.
type SimOutcome struct {
	Scenario SimScenario `json:"scenario"`
	// Utilization is the average over samples (after the first 2 s) of
	// min(1, handed out / min(capacity, total wants)).
	Utilization float64 `json:"utilization"`
	// UtilizationOutsideOutage leaves out the samples while no
	// coordinator ran (scenario b).
	UtilizationOutsideOutage float64 `json:"utilization_outside_outage,omitempty"`
	// OutageS is the time no coordinator ran (scenario b).
	OutageS [2]float64 `json:"outage_s,omitempty"`
	// OvershootEvents counts the times the sum of unexpired leases went
	// above capacity; MaxLeaseRatio is the largest sum / capacity.
	OvershootEvents int     `json:"overshoot_events"`
	MaxLeaseRatio   float64 `json:"max_lease_ratio"`
	NegativeGrants  int     `json:"negative_grants"`
	Leases          int     `json:"leases_observed"`
	// Jain is the average Jain's fairness index of has/fair-share over the
	// contended samples (1 is perfectly fair; 0 when there were none, as
	// JSON has no NaN).
	Jain   float64 `json:"jain_fairness"`
	Shifts []Shift `json:"shifts"`
	// FirstAnswerAfterLossS is, in scenario (b), the time from the
	// leader's loss to the first lease from its successor;
	// FirstAnswerAfterStartS from the successor's start.
	FirstAnswerAfterLossS  float64 `json:"first_answer_after_loss_s,omitempty"`
	FirstAnswerAfterStartS float64 `json:"first_answer_after_start_s,omitempty"`
	Samples                int     `json:"samples"`

	series simSeries
}

// SimResult is the outcome of RunSim.
type SimResult struct {
	Machine   Machine      `json:"machine"`
	Capacity  float64      `json:"capacity"`
	Refresh   string       `json:"refresh_interval"`
	Lease     string       `json:"lease_length"`
	Outcomes  []SimOutcome `json:"outcomes"`
	Failover  string       `json:"failover"`
	TargetUtl float64      `json:"target_utilization"`
}

// RunSim runs the convergence scenarios with a real coordinator and real
// agents over an embedded nats-server.
func RunSim(ctx context.Context, env *Env) (*SimResult, error) {
	res := &SimResult{Machine: DescribeMachine(), Capacity: simCapacity, Refresh: simRefresh.String(), Lease: simLease.String(),
		TargetUtl: TargetUtilization,
		Failover:  "two elected replicas (coordinator.Replica); the leader is lost abruptly (its NATS connection closed) and the follower takes over"}
	for _, sc := range Scenarios(env.Short) {
		out, err := Simulate(ctx, env, sc)
		if err != nil {
			return nil, fmt.Errorf("bench: scenario %s: %w", sc.Key, err)
		}
		res.Outcomes = append(res.Outcomes, *out)
		env.progressf("sim %s: utilization %.4f, overshoot events %d (max %.4f× capacity), Jain %.4f",
			sc.Key, out.Utilization, out.OvershootEvents, out.MaxLeaseRatio, out.Jain)
		if err := env.writeFile("sim-"+sc.Key+".svg", out.plot()); err != nil {
			return res, err
		}
		if err := env.writeFile("sim-"+sc.Key+".csv", out.series.csv()); err != nil {
			return res, err
		}
	}
	if err := env.writeJSON("sim.json", res); err != nil {
		return res, err
	}
	return res, env.writeFile("sim.md", []byte(res.Markdown()))
}

// simClient is one simulated client: an agent on its own connection.
type simClient struct {
	id     int
	nc     *nats.Conn
	a      *agent.Agent
	l      *agent.RateLimiter
	base   float64 // wants before spikes
	wants  float64
	active bool
	closed time.Duration // when it left, 0 if not
}

// leaseEvent is one lease the coordinator handed out, seen on the wire.
type leaseEvent struct {
	client   int
	arrival  time.Duration // since the start
	issued   int64         // unix ns: expiry minus lease length
	expiry   int64         // unix ns
	capacity float64
}

// monitor sees every reply sent to the simulated clients' inboxes.
type monitor struct {
	mu     sync.Mutex
	start  time.Time
	events []leaseEvent
	latest map[int]leaseEvent // by arrival
}

func (m *monitor) onReply(msg *nats.Msg) {
	// _INBOX.sim.<client>.<...>
	parts := strings.SplitN(msg.Subject, ".", 4)
	if len(parts) < 4 {
		return
	}
	k, err := strconv.Atoi(parts[2])
	if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
		return
	}
	var resp allotpb.GetCapacityResponse
	if wire.Unmarshal(wire.ReplyEncodingOf(msg.Header), msg.Data, &resp) != nil {
		return
	}
	now := time.Since(m.start)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rr := range resp.GetResponse() {
		if rr.GetResourceId() != simResource || rr.GetGets().GetExpiryTime() == nil {
			continue
		}
		exp := rr.GetGets().GetExpiryTime().AsTime().UnixNano()
		ev := leaseEvent{client: k, arrival: now, expiry: exp, issued: exp - int64(simLease), capacity: rr.GetGets().GetCapacity()}
		m.events = append(m.events, ev)
		m.latest[k] = ev
	}
}

// simSeries is the sampled time series of a scenario.
type simSeries struct {
	t      []float64 // seconds
	wants  [][]float64
	has    [][]float64
	totalW []float64
	totalH []float64
	fair   [][]float64
}

func (s *simSeries) csv() []byte {
	var b strings.Builder
	b.WriteString("t_s,total_wants,total_has,capacity")
	n := 0
	if len(s.wants) > 0 {
		n = len(s.wants[0])
	}
	for k := 0; k < n; k++ {
		fmt.Fprintf(&b, ",wants_%d,has_%d", k, k)
	}
	b.WriteString("\n")
	for i := range s.t {
		fmt.Fprintf(&b, "%.3f,%.2f,%.2f,%g", s.t[i], s.totalW[i], s.totalH[i], simCapacity)
		for k := 0; k < n; k++ {
			fmt.Fprintf(&b, ",%.2f,%.2f", s.wants[i][k], s.has[i][k])
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// Simulate runs one scenario.
func Simulate(ctx context.Context, env *Env, sc SimScenario) (*SimOutcome, error) {
	srv, shutdown, err := startServer()
	if err != nil {
		return nil, err
	}
	defer shutdown()
	url := srv.ClientURL()
	log := env.logger()
	tmpl := benchTemplate(simCapacity, simLease, simRefresh)
	tmpls := sources.StaticTemplates(config.NewSet(1, nil, tmpl))
	startCoord := func(id string) (*coordinator.Coordinator, *nats.Conn, error) {
		nc, err := nats.Connect(url, nats.Name("allot sim coordinator "+id))
		if err != nil {
			return nil, nil, fmt.Errorf("bench: connect: %w", err)
		}
		c, err := startCoordinator(ctx, nc, coordOptions{round: coordinator.DefaultRoundInterval, tmpls: tmpls, id: id}, log)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return c, nc, nil
	}
	var coord *coordinator.Coordinator
	var coordNC *nats.Conn
	var replicas []*simReplica
	if sc.Replicas {
		for _, id := range []string{"sim-replica-1", "sim-replica-2"} {
			r, err := startReplica(ctx, url, coordinator.Options{ServerID: id, Templates: tmpls, Logger: log})
			if err != nil {
				return nil, err
			}
			replicas = append(replicas, r)
			if len(replicas) == 1 {
				select {
				case <-r.serving:
				case <-time.After(30 * time.Second):
					return nil, errors.New("bench: first replica did not lead within 30s")
				}
			}
		}
		defer func() {
			for _, r := range replicas {
				r.stop()
			}
		}()
	} else {
		coord, coordNC, err = startCoord("sim-1")
		if err != nil {
			return nil, err
		}
		defer func() {
			coordNC.Close()
			coord.Stop()
		}()
	}

	mon := &monitor{latest: map[int]leaseEvent{}}
	monNC, err := nats.Connect(url, nats.Name("allot sim monitor"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer monNC.Close()
	sub, err := monNC.Subscribe("_INBOX.sim.>", mon.onReply)
	if err != nil {
		return nil, fmt.Errorf("bench: monitor: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := monNC.Flush(); err != nil {
		return nil, fmt.Errorf("bench: monitor: %w", err)
	}

	maxClients := sc.Clients
	for _, e := range sc.Events {
		for _, k := range e.Clients {
			maxClients = max(maxClients, k+1)
		}
	}
	clients := make([]*simClient, maxClients)
	defer func() {
		for _, c := range clients {
			if c != nil && c.a != nil {
				_ = c.a.Close()
				c.nc.Close()
			}
		}
	}()
	rng := rand.New(rand.NewPCG(sc.Seed, 42))
	mon.start = time.Now()
	start := mon.start
	join := func(k int, wants float64) error {
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("allot sim client %d", k)), nats.CustomInboxPrefix(fmt.Sprintf("_INBOX.sim.%d", k)))
		if err != nil {
			return fmt.Errorf("bench: connect: %w", err)
		}
		a, err := agent.New(nc, agent.WithClientID(fmt.Sprintf("sim-client-%d", k)), agent.WithMinRefreshGap(100*time.Millisecond),
			agent.WithRequestTimeout(time.Second), agent.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			nc.Close()
			return fmt.Errorf("bench: agent: %w", err)
		}
		l, err := a.Rate(simResource, agent.WithWants(wants))
		if err != nil {
			_ = a.Close()
			nc.Close()
			return fmt.Errorf("bench: agent rate: %w", err)
		}
		clients[k] = &simClient{id: k, nc: nc, a: a, l: l, base: wants, wants: wants, active: true}
		return nil
	}
	for k := 0; k < sc.Clients; k++ {
		if err := join(k, sc.Wants); err != nil {
			return nil, err
		}
	}

	out := &SimOutcome{Scenario: sc}
	var lossAt, backAt time.Duration
	events := slices.Clone(sc.Events)
	nextStep := simStep
	err = everySample(ctx, start, sc.Duration, func(now time.Duration) error {
		// Scripted events.
		for len(events) > 0 && events[0].At <= now {
			e := events[0]
			events = events[1:]
			switch e.What {
			case "join":
				for _, k := range e.Clients {
					if err := join(k, e.Wants); err != nil {
						return err
					}
				}
			case "leave":
				for _, k := range e.Clients {
					if c := clients[k]; c != nil && c.active {
						c.active, c.closed = false, time.Since(start)
						_ = c.a.Close()
					}
				}
			case "spike":
				for _, k := range e.Clients {
					if c := clients[k]; c != nil && c.active {
						c.wants = c.base * e.Factor
						_ = c.l.SetWants(c.wants)
					}
				}
			case "unspike":
				for _, k := range e.Clients {
					if c := clients[k]; c != nil && c.active {
						c.wants = c.base
						_ = c.l.SetWants(c.wants)
					}
				}
			case "leader-lost":
				lossAt = time.Since(start)
				if sc.Replicas {
					for _, r := range replicas {
						if r.leading() {
							r.nc.Close() // abrupt: no resignation, nothing answered
							break
						}
					}
					break
				}
				coordNC.Close() // abrupt: no goodbye, queued requests unanswered
				coord.Stop()
			case "leader-back":
				c, nc, err := startCoord("sim-2")
				if err != nil {
					return err
				}
				coord, coordNC = c, nc
				backAt = time.Since(start)
			}
			out.Shifts = append(out.Shifts, Shift{What: e.What, AtS: e.At.Seconds(), ReconvergeS: -1})
		}
		// Random walk of the wants, mean-reverting to each client's base.
		if now >= nextStep {
			nextStep += simStep
			for _, c := range clients {
				if c == nil || !c.active {
					continue
				}
				spiked := c.wants > c.base*1.5
				c.base = math.Max(10, math.Min(200, c.base+rng.NormFloat64()*8+0.1*(100-c.base)))
				if !spiked {
					c.wants = c.base
				} else {
					c.wants = c.base * 10
				}
				_ = c.l.SetWants(c.wants)
			}
		}
		// Sample.
		nowNS := time.Now().UnixNano()
		mon.mu.Lock()
		w := make([]float64, maxClients)
		h := make([]float64, maxClients)
		var d []alloc.Demand
		var idx []int
		for k, c := range clients {
			if c == nil || !c.active {
				continue
			}
			w[k] = c.wants
			if ev, ok := mon.latest[k]; ok && ev.expiry > nowNS {
				h[k] = ev.capacity
			}
			d = append(d, alloc.Demand{Wants: c.wants, Weight: 1})
			idx = append(idx, k)
		}
		mon.mu.Unlock()
		alloc.FairShare(simCapacity, d, nil)
		fair := make([]float64, maxClients)
		for j, k := range idx {
			fair[k] = d[j].Target
		}
		s := &out.series
		s.t = append(s.t, now.Seconds())
		s.wants, s.has, s.fair = append(s.wants, w), append(s.has, h), append(s.fair, fair)
		s.totalW, s.totalH = append(s.totalW, sum(w)), append(s.totalH, sum(h))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if sc.Replicas && lossAt > 0 {
		backAt = lossAt // the successor's first answer is measured from the loss
	}
	if backAt > 0 {
		mon.mu.Lock()
		for _, ev := range mon.events {
			if ev.arrival > backAt {
				out.FirstAnswerAfterLossS = (ev.arrival - lossAt).Seconds()
				out.FirstAnswerAfterStartS = (ev.arrival - backAt).Seconds()
				break
			}
		}
		mon.mu.Unlock()
	}
	closed := map[int]int64{}
	for _, c := range clients {
		if c != nil && c.closed > 0 {
			closed[c.id] = start.Add(c.closed).UnixNano()
		}
	}
	mon.mu.Lock()
	evs := slices.Clone(mon.events)
	mon.mu.Unlock()
	if sc.Replicas && lossAt > 0 {
		out.OutageS = [2]float64{lossAt.Seconds(), lossAt.Seconds() + out.FirstAnswerAfterLossS}
	} else if backAt > 0 {
		out.OutageS = [2]float64{lossAt.Seconds(), backAt.Seconds()}
	}
	out.analyze(evs, closed)
	return out, nil
}

// everySample calls f every simSample with the time since start, until d
// has passed, ctx ends or f fails.
func everySample(ctx context.Context, start time.Time, d time.Duration, f func(now time.Duration) error) error {
	tick := time.NewTicker(simSample)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case t := <-tick.C:
			now := t.Sub(start)
			if now >= d {
				return nil
			}
			if err := f(now); err != nil {
				return err
			}
		}
	}
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

// simReplica is one coordinator.Replica with its own connection.
type simReplica struct {
	nc      *nats.Conn
	cancel  context.CancelFunc
	done    chan struct{}
	serving chan struct{}
	mu      sync.Mutex
	lead    bool
}

func (r *simReplica) leading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lead
}

func (r *simReplica) stop() {
	r.cancel()
	<-r.done
	r.nc.Close()
}

// startReplica runs a replica of o.Node (default the root) in the
// election (TTL 3s), on a connection of its own made with nopts.
func startReplica(ctx context.Context, url string, o coordinator.Options, nopts ...nats.Option) (*simReplica, error) {
	id, log := o.ServerID, o.Logger
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("allot sim " + id)}, nopts...)...)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	r := &simReplica{nc: nc, done: make(chan struct{}), serving: make(chan struct{})}
	var once sync.Once
	rep, err := coordinator.NewReplica(nc, coordinator.ReplicaOptions{
		Options: o,
		Election: replica.Election{TTL: 3 * time.Second, OnServing: func(_ uint64, serving bool) {
			r.mu.Lock()
			r.lead = serving
			r.mu.Unlock()
			if serving {
				once.Do(func() { close(r.serving) })
			}
		}},
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: replica: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	go func() {
		defer close(r.done)
		if err := rep.Run(rctx); err != nil {
			log.Info("replica ended", "id", id, "err", err)
		}
	}()
	return r, nil
}
