package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/netcut"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Doorman's scenario 7 with real coordinators, agents and nats-servers:
// a root, 3 regions, 3 clusters per region and 5 clients per cluster,
// each level its own nats-server (and JetStream domain) joined to its
// parent's by a leaf-node connection. Time is compressed 10× against
// Doorman's 5 s refresh; leases outlast a failover (election TTL 3 s) and
// a cut leaf link, as 60 s leases do in production.
const (
	treeCapacity = 500.0
	treeRefresh  = 500 * time.Millisecond
	treeLease    = 10 * time.Second
	treeResource = "sim7/resource"
	treeWants    = 14.0 // each client's initial wants
	// treeMean is what the wants revert to: 45 clients then want about
	// the capacity in all, so that a spike moves capacity between
	// subtrees (Doorman: shortfall happens near capacity, after a spike).
	treeMean   = treeCapacity / 45
	treeSpike  = 100.0 // added to a spiking client's wants
	treeWarmup = 3 * time.Second
	treeLevels = 3 // root → regions, regions → clusters, clusters → clients
	// treeFloorLease is the floor lease of benchTemplate.
	treeFloorLease = 5 * treeLease
	treeInbox      = "_INBOX.sim7"
	// treeConnectTimeout replaces nats.go's 2s: the scenario starts
	// dozens of connections to in-process servers, and on a loaded
	// machine (a -race test run beside another) one timed out.
	treeConnectTimeout = 10 * time.Second
)

// treeLevelNames names the lease levels, from the root down.
var treeLevelNames = [treeLevels]string{"root → regions", "regions → clusters", "clusters → clients"}

// TreeEvent is a mishap in the tree scenario.
type TreeEvent struct {
	At   time.Duration `json:"at_ns"`
	What string        `json:"what"` // spike, unspike, leader-lost, cut, restore
	// Client is the spiking client; Node the node whose leader is lost or
	// whose leaf link to its parent is cut or restored.
	Client int    `json:"client"`
	Node   string `json:"node,omitempty"`
}

// TreeScenario describes a run of the tree simulation.
type TreeScenario struct {
	Title    string        `json:"title"`
	Duration time.Duration `json:"duration_ns"`
	Regions  int           `json:"regions"`
	Clusters int           `json:"clusters_per_region"`
	Clients  int           `json:"clients_per_cluster"`
	Seed     uint64        `json:"seed"`
	// ReplicaNode runs as two elected coordinator.Replica; a leader-lost
	// event closes its leader's connection.
	ReplicaNode string      `json:"replica_node"`
	Events      []TreeEvent `json:"events"`
}

// Scenario7 returns Doorman's scenario 7 in compressed time: a mishap
// every few seconds (a client's wants +100 and back), one leader lost at
// a region (its replica takes over) and a region's leaf link to the root
// cut and restored one mishap later.
func Scenario7(short bool) TreeScenario {
	d, gap := 150*time.Second, 5*time.Second
	if short {
		d, gap = 45*time.Second, 4*time.Second
	}
	sc := TreeScenario{Title: "Doorman's scenario 7: root, 3 regions × 3 clusters × 5 clients, capacity 500",
		Duration: d, Regions: 3, Clusters: 3, Clients: 5, Seed: 7, ReplicaNode: treeNodeName(1, 1, -1)}
	n := int(d/gap) - 1
	lost, cut := n/3, n/2
	rng := rand.New(rand.NewPCG(sc.Seed, 77))
	var spiked []int
	for i := 1; i <= n; i++ {
		at := time.Duration(i) * gap
		switch {
		case i == lost:
			sc.Events = append(sc.Events, TreeEvent{At: at, What: "leader-lost", Node: sc.ReplicaNode})
		case i == cut:
			sc.Events = append(sc.Events, TreeEvent{At: at, What: "cut", Node: treeNodeName(1, 2, -1)})
		case i == cut+1:
			sc.Events = append(sc.Events, TreeEvent{At: at, What: "restore", Node: treeNodeName(1, 2, -1)})
		case len(spiked) > 1 || (len(spiked) == 1 && rng.IntN(2) == 0):
			sc.Events = append(sc.Events, TreeEvent{At: at, What: "unspike", Client: spiked[0]})
			spiked = spiked[1:]
		default:
			k := rng.IntN(sc.Regions * sc.Clusters * sc.Clients)
			for slices.Contains(spiked, k) {
				k = rng.IntN(sc.Regions * sc.Clusters * sc.Clients)
			}
			sc.Events = append(sc.Events, TreeEvent{At: at, What: "spike", Client: k})
			spiked = append(spiked, k)
		}
	}
	return sc
}

// check reports a scenario that names nodes or clients it does not have,
// or a tree too large for one machine.
func (sc TreeScenario) check() error {
	if sc.Regions < 1 || sc.Clusters < 1 || sc.Clients < 1 || sc.Regions*sc.Clusters > 30 || sc.Regions*sc.Clusters*sc.Clients > 500 {
		return fmt.Errorf("bench: a tree of %d regions × %d clusters × %d clients: want at least one of each, at most 30 clusters and 500 clients",
			sc.Regions, sc.Clusters, sc.Clients)
	}
	nodes := map[string]bool{}
	for r := range sc.Regions {
		nodes[treeNodeName(1, r, -1)] = true
		for c := range sc.Clusters {
			nodes[treeNodeName(2, r, c)] = true
		}
	}
	if sc.ReplicaNode != "" && sc.ReplicaNode != "root" && !nodes[sc.ReplicaNode] {
		return fmt.Errorf("bench: replica node %q is not in the tree", sc.ReplicaNode)
	}
	for _, e := range sc.Events {
		switch e.What {
		case "spike", "unspike":
			if e.Client < 0 || e.Client >= sc.Regions*sc.Clusters*sc.Clients {
				return fmt.Errorf("bench: %s of client %d: the tree has clients 0 to %d", e.What, e.Client, sc.Regions*sc.Clusters*sc.Clients-1)
			}
		case "leader-lost":
			if e.Node == "" || e.Node != sc.ReplicaNode {
				return fmt.Errorf("bench: leader-lost at %q: only the replica node %q has a follower to take over", e.Node, sc.ReplicaNode)
			}
		case "cut", "restore":
			if !nodes[e.Node] {
				return fmt.Errorf("bench: %s of %q: want a region or cluster of the tree (the root has no parent link)", e.What, e.Node)
			}
		default:
			return fmt.Errorf("bench: unknown event %q: want spike, unspike, leader-lost, cut or restore", e.What)
		}
	}
	return nil
}

// treeNodeName names the node at depth (0 root, 1 region, 2 cluster).
func treeNodeName(depth, region, cluster int) string {
	switch depth {
	case 0:
		return "root"
	case 1:
		return fmt.Sprintf("region-%d", region)
	}
	return fmt.Sprintf("cluster-%d-%d", region, cluster)
}

// TreeShift is a mishap and how long each level took to settle after it.
type TreeShift struct {
	What string  `json:"what"`
	AtS  float64 `json:"at_s"`
	On   string  `json:"on,omitempty"`
	// ReconvergeS per level (root → regions, regions → clusters, clusters
	// → clients): time from the shift to the first sample where that
	// level's leases add up to ≥ 99% of what it should hand out and are
	// within 5% of capacity of the tree's shares; -1 if not before the
	// next shift or the end.
	ReconvergeS [treeLevels]float64 `json:"reconverge_s"`
}

// TreeLevel holds one level's overshoot figures.
type TreeLevel struct {
	Level string `json:"level"`
	// MaxLeaseRatio is the largest sum of the level's unexpired leases ÷
	// the root's capacity; OvershootEvents counts crossings above 1.
	MaxLeaseRatio   float64 `json:"max_lease_ratio"`
	OvershootEvents int     `json:"overshoot_events"`
	Leases          int     `json:"leases_observed"`
}

// TreeOutcome is the result of the tree simulation.
type TreeOutcome struct {
	Machine  Machine      `json:"machine"`
	Scenario TreeScenario `json:"scenario"`
	Capacity float64      `json:"capacity"`
	Refresh  string       `json:"refresh_interval"`
	Lease    string       `json:"lease_length"`
	// Utilization is the average over 50 ms samples (after the first 3 s)
	// of min(1, Σ client leases ÷ min(capacity, Σ wants)).
	Utilization float64 `json:"utilization"`
	// OvershootEvents and MaxLeaseRatio are the client level's (what the
	// issue's invariant is about); Levels has every level's.
	OvershootEvents int         `json:"overshoot_events"`
	MaxLeaseRatio   float64     `json:"max_lease_ratio"`
	Levels          []TreeLevel `json:"levels"`
	NegativeGrants  int         `json:"negative_grants"`
	// MaxInForceRatio is the largest sampled Σ capacity in force at the
	// agents (leases, or safe capacity without one) ÷ capacity;
	// SafeSamples counts samples where some client had no lease.
	MaxInForceRatio float64 `json:"max_in_force_ratio"`
	SafeSamples     int     `json:"safe_samples"`
	// Jain is the average Jain's index of client has ÷ global fair share
	// (alloc.FairShare over all 45 clients) over contended samples; JainTree
	// the same against the tree's own shares (fair share per level on
	// summed wants, which is what the protocol converges to).
	Jain     float64     `json:"jain_fairness"`
	JainTree float64     `json:"jain_fairness_tree"`
	Shifts   []TreeShift `json:"shifts"`
	// Steps sums up reconvergence per level after every step of the
	// random walk (every second, until the next step or mishap).
	Steps [treeLevels]StepFigures `json:"steps"`
	// ShortfallSamples counts samples where some node had leased out more
	// than its own lease from its parent (what Doorman calls shortfall
	// at a node; the parent still counts the excess as the node's, so it
	// is not an overshoot), and MaxShortfall is the largest such excess.
	ShortfallSamples int     `json:"shortfall_samples"`
	MaxShortfall     float64 `json:"max_shortfall"`
	// Underuse is the longest stretch in which a node handed out less
	// than 95% of its own lease while the clients behind it wanted more
	// than that lease.
	Underuse Underuse `json:"longest_underuse"`
	// FailoverS is the time from the loss of the replica node's leader
	// to the first lease its successor handed a child.
	FailoverS float64 `json:"failover_s"`
	Samples   int     `json:"samples"`
	SetupS    float64 `json:"setup_s"`
	RunS      float64 `json:"run_s"`

	series     treeSeries
	underSince []float64 // per node: start of the current underuse, 0 none
}

// Underuse is a stretch of samples in which a node held capacity back.
type Underuse struct {
	Node  string  `json:"node,omitempty"`
	FromS float64 `json:"from_s"`
	ForS  float64 `json:"for_s"`
}

// StepFigures sums up the reconvergence of one level after the random
// walk's steps: median and largest time to the first converged sample,
// and how many steps were not followed by one before the next change.
type StepFigures struct {
	MedianS float64 `json:"median_s"`
	MaxS    float64 `json:"max_s"`
	Missed  int     `json:"missed"`
	Steps   int     `json:"steps"`
}

// TargetReconvergence is the reconvergence target per level: two refresh
// intervals.
const TargetReconvergence = 2 * treeRefresh

// treeSeries is the sampled time series.
type treeSeries struct {
	t, totalW, totalH, inForce []float64
	regionH                    [][]float64 // Σ client has per region
	regionW                    [][]float64 // Σ client wants per region
	rootLease                  [][]float64 // the root's lease to each region
	regionOut                  [][]float64 // Σ a region's leases to its clusters
	conv                       [][treeLevels]bool
	steps                      []float64 // times of the random walk's steps
}

// treeNode is one level's nats-server and coordinator(s).
type treeNode struct {
	name, parent string
	depth        int
	region       int
	opts         *server.Options
	srv          *server.Server
	link         *netcut.Relay // the leaf link to the parent, to cut it
	dir          string
	nc           *nats.Conn
	coord        *coordinator.Coordinator
	replicas     []*simReplica
	mon          *nats.Conn
	children     []int // indexes in the nodes slice
	clients      []int // clients of a cluster
}

// leaseSeen is one lease seen on the wire.
type leaseSeen struct {
	level    int    // 0 root → region, 1 region → cluster, 2 cluster → client
	who      string // node name or client index
	arrival  int64  // unix ns
	expiry   int64  // unix ns
	capacity float64
}

// treeMonitor records the leases replied to the clients' and nodes'
// inboxes, on each level's server.
type treeMonitor struct {
	mu     sync.Mutex
	depth  map[string]int // node → depth
	events []leaseSeen
	latest map[string]leaseSeen
}

func (m *treeMonitor) onReply(msg *nats.Msg) {
	// _INBOX.sim7.<node>.<up|c<k>>.<...>
	parts := strings.SplitN(msg.Subject, ".", 5)
	if len(parts) < 5 || msg.Header.Get("Nats-Service-Error-Code") != "" {
		return
	}
	node, who := parts[2], parts[3]
	enc := wire.ReplyEncodingOf(msg.Header)
	var leases []*allotpb.Lease
	level := treeLevels - 1
	if who == "up" {
		var resp allotpb.GetServerCapacityResponse
		if wire.Unmarshal(enc, msg.Data, &resp) != nil {
			return
		}
		level, who, leases = m.depth[node]-1, node, simLeases(resp.GetResponse())
	} else {
		var resp allotpb.GetCapacityResponse
		if wire.Unmarshal(enc, msg.Data, &resp) != nil {
			return
		}
		who, leases = strings.TrimPrefix(who, "c"), simLeases(resp.GetResponse())
	}
	now := time.Now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range leases {
		if l.GetExpiryTime() == nil {
			continue
		}
		ev := leaseSeen{level: level, who: who, arrival: now, expiry: l.GetExpiryTime().AsTime().UnixNano(), capacity: l.GetCapacity()}
		m.events = append(m.events, ev)
		m.latest[who] = ev
	}
}

// simLeases picks the simulated resource's leases from a response.
func simLeases[R interface {
	GetResourceId() string
	GetGets() *allotpb.Lease
}](rs []R) []*allotpb.Lease {
	var out []*allotpb.Lease
	for _, r := range rs {
		if r.GetResourceId() == treeResource && r.GetGets() != nil {
			out = append(out, r.GetGets())
		}
	}
	return out
}

// has returns who's unexpired lease at unix ns now.
func (m *treeMonitor) has(who string, now int64) float64 {
	if ev, ok := m.latest[who]; ok && ev.expiry > now {
		return ev.capacity
	}
	return 0
}

// treeTemplates is the resource's template at every level; only the
// root's capacity counts, the others lease theirs from their parent.
func treeTemplates() coordinator.TemplateSource {
	return sources.StaticTemplates(config.NewSet(1, nil, benchTemplate(treeCapacity, treeLease, treeRefresh)))
}

// startLevel starts one level's nats-server (JetStream domain = node),
// joined to the parent's leaf port if parent > 0.
func startLevel(n *treeNode, parentLeafPort int) error {
	dir, err := os.MkdirTemp("", "allot-sim7-*")
	if err != nil {
		return fmt.Errorf("bench: temp dir: %w", err)
	}
	n.dir = dir
	n.opts = &server.Options{ServerName: n.name, Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		JetStreamDomain: n.name, StoreDir: dir, NoLog: true, NoSigs: true,
		// NoAdvertise: a child must not learn the parent's own leaf
		// address and reconnect around the relay while it is cut.
		LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoAdvertise: true}}
	if parentLeafPort > 0 {
		// Through a relay that can be cut: reloading the server's options
		// to disable the remote races with the server's readers of them.
		link, err := netcut.New(fmt.Sprintf("127.0.0.1:%d", parentLeafPort))
		if err != nil {
			return fmt.Errorf("bench: leaf relay of %s: %w", n.name, err)
		}
		n.link = link
		lu, _ := url.Parse("nats-leaf://" + link.Addr())
		n.opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{lu}}}
	}
	s, err := server.NewServer(n.opts)
	if err != nil {
		return fmt.Errorf("bench: server %s: %w", n.name, err)
	}
	n.srv = s
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		return fmt.Errorf("bench: server %s not ready", n.name)
	}
	if parentLeafPort > 0 {
		return waitLeaf(s, n.name)
	}
	return nil
}

// waitLeaf waits until s has a leaf connection.
func waitLeaf(s *server.Server, name string) error {
	deadline := time.Now().Add(20 * time.Second)
	for s.NumLeafNodes() == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: leaf connection of %s not up", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// setLeaf cuts (disabled) or restores n's leaf link to its parent.
func (n *treeNode) setLeaf(disabled bool) error {
	if n.link == nil {
		return fmt.Errorf("bench: %s has no parent link to cut", n.name)
	}
	if disabled {
		n.link.Cut()
	} else {
		n.link.Restore()
	}
	return nil
}

func (n *treeNode) stop() {
	for _, r := range n.replicas {
		r.stop()
	}
	if n.coord != nil {
		n.coord.Stop()
		n.nc.Close()
	}
	if n.mon != nil {
		n.mon.Close()
	}
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
	if n.link != nil {
		_ = n.link.Close()
	}
	if n.dir != "" {
		_ = os.RemoveAll(n.dir)
	}
}

// treeClient is one simulated client: an agent on its own connection to
// its cluster's server.
type treeClient struct {
	cluster int // index in the nodes slice
	region  int
	nc      *nats.Conn
	a       *agent.Agent
	l       *agent.RateLimiter
	base    float64
	spiked  bool
}

func (c *treeClient) wants() float64 {
	if c.spiked {
		return c.base + treeSpike
	}
	return c.base
}

// RunTreeSim runs Doorman's scenario 7 (short or full) and writes
// sim7.{json,md,csv,svg}.
func RunTreeSim(ctx context.Context, env *Env) (*TreeOutcome, error) {
	out, err := SimulateTree(ctx, env, Scenario7(env.Short))
	if err != nil {
		return nil, fmt.Errorf("bench: scenario 7: %w", err)
	}
	env.progressf("sim 7: utilization %.4f, overshoot events %d (max %.4f× capacity), Jain %.4f",
		out.Utilization, out.OvershootEvents, out.MaxLeaseRatio, out.Jain)
	if err := env.writeFile("sim7.svg", out.plot()); err != nil {
		return out, err
	}
	if err := env.writeFile("sim7.csv", out.series.csv()); err != nil {
		return out, err
	}
	if err := env.writeJSON("sim7.json", out); err != nil {
		return out, err
	}
	return out, env.writeFile("sim7.md", []byte(out.Markdown()))
}

// SimulateTree runs a tree scenario: it builds the levels, runs the
// mishaps while sampling every 50 ms, and analyzes what it saw.
func SimulateTree(ctx context.Context, env *Env, sc TreeScenario) (*TreeOutcome, error) {
	if err := sc.check(); err != nil {
		return nil, err
	}
	setup := time.Now()
	log := env.logger()
	tmpls := treeTemplates()
	// Nodes: root, then regions, then clusters.
	nodes := []*treeNode{{name: "root", depth: 0}}
	for r := range sc.Regions {
		nodes = append(nodes, &treeNode{name: treeNodeName(1, r, -1), parent: "root", depth: 1, region: r})
		nodes[0].children = append(nodes[0].children, len(nodes)-1)
	}
	for r := range sc.Regions {
		for c := range sc.Clusters {
			nodes = append(nodes, &treeNode{name: treeNodeName(2, r, c), parent: treeNodeName(1, r, -1), depth: 2, region: r})
			nodes[1+r].children = append(nodes[1+r].children, len(nodes)-1)
		}
	}
	defer func() {
		for i := len(nodes) - 1; i >= 0; i-- {
			nodes[i].stop()
		}
	}()
	byName := map[string]*treeNode{}
	mon := &treeMonitor{depth: map[string]int{}, latest: map[string]leaseSeen{}}
	for _, n := range nodes {
		byName[n.name] = n
		mon.depth[n.name] = n.depth
		port := 0
		if n.parent != "" {
			port = byName[n.parent].opts.LeafNode.Port
		}
		if err := startLevel(n, port); err != nil {
			return nil, err
		}
	}
	// Coordinators from the root down, on connections whose replies the
	// monitors see (_INBOX.sim7.<node>.up).
	for _, n := range nodes {
		url := n.srv.ClientURL()
		inbox := nats.CustomInboxPrefix(treeInbox + "." + n.name + ".up")
		if n.name == sc.ReplicaNode {
			for _, id := range []string{n.name + "-a", n.name + "-b"} {
				r, err := startReplica(ctx, url, coordinator.Options{Node: n.name, Parent: n.parent, ServerID: id, Templates: tmpls, Logger: log}, inbox)
				if err != nil {
					return nil, err
				}
				n.replicas = append(n.replicas, r)
				if len(n.replicas) == 1 {
					select {
					case <-r.serving:
					case <-time.After(30 * time.Second):
						return nil, fmt.Errorf("bench: no replica of %s led within 30s", n.name)
					}
				}
			}
			continue
		}
		nc, err := nats.Connect(url, nats.Name("allot sim7 coordinator "+n.name), inbox, nats.Timeout(treeConnectTimeout))
		if err != nil {
			return nil, fmt.Errorf("bench: connect: %w", err)
		}
		n.nc = nc
		if n.coord, err = startCoordinator(ctx, nc, coordOptions{node: n.name, parent: n.parent, id: n.name,
			round: coordinator.DefaultRoundInterval, tmpls: tmpls}, log); err != nil {
			return nil, err
		}
	}
	for _, n := range nodes[1:] {
		nc, err := nats.Connect(n.srv.ClientURL(), nats.Name("allot sim7 monitor "+n.name), nats.Timeout(treeConnectTimeout))
		if err != nil {
			return nil, fmt.Errorf("bench: connect: %w", err)
		}
		n.mon = nc
		sub, err := nc.Subscribe(treeInbox+"."+n.name+".>", mon.onReply)
		if err != nil {
			return nil, fmt.Errorf("bench: monitor: %w", err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		if err := nc.Flush(); err != nil {
			return nil, fmt.Errorf("bench: monitor: %w", err)
		}
	}

	// Clients, 5 per cluster, each an agent on its own connection.
	var clients []*treeClient
	defer func() {
		for _, c := range clients {
			_ = c.a.Close()
			c.nc.Close()
		}
	}()
	for i, n := range nodes {
		if n.depth != 2 {
			continue
		}
		for range sc.Clients {
			k := len(clients)
			nc, err := nats.Connect(n.srv.ClientURL(), nats.Name(fmt.Sprintf("allot sim7 client %d", k)),
				nats.CustomInboxPrefix(fmt.Sprintf("%s.%s.c%d", treeInbox, n.name, k)), nats.Timeout(treeConnectTimeout))
			if err != nil {
				return nil, fmt.Errorf("bench: connect: %w", err)
			}
			a, err := agent.New(nc, agent.WithNode(n.name), agent.WithClientID(fmt.Sprintf("sim7-client-%d", k)),
				agent.WithMinRefreshGap(100*time.Millisecond), agent.WithRequestTimeout(time.Second),
				agent.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				nc.Close()
				return nil, fmt.Errorf("bench: agent: %w", err)
			}
			l, err := a.Rate(treeResource, agent.WithWants(treeWants))
			if err != nil {
				_ = a.Close()
				nc.Close()
				return nil, fmt.Errorf("bench: agent rate: %w", err)
			}
			clients = append(clients, &treeClient{cluster: i, region: n.region, nc: nc, a: a, l: l, base: treeWants})
			n.clients = append(n.clients, k)
		}
	}

	out := &TreeOutcome{Machine: DescribeMachine(), Scenario: sc, Capacity: treeCapacity, Refresh: treeRefresh.String(),
		Lease: treeLease.String(), SetupS: time.Since(setup).Seconds()}
	rng := rand.New(rand.NewPCG(sc.Seed, 42))
	start := time.Now()
	var lossAt time.Time
	events := slices.Clone(sc.Events)
	nextStep := simStep
	err := everySample(ctx, start, sc.Duration, func(now time.Duration) error {
		for len(events) > 0 && events[0].At <= now {
			e := events[0]
			events = events[1:]
			sh := TreeShift{What: e.What, AtS: now.Seconds(), ReconvergeS: [treeLevels]float64{-1, -1, -1}}
			switch e.What {
			case "spike", "unspike":
				c := clients[e.Client]
				c.spiked = e.What == "spike"
				_ = c.l.SetWants(c.wants())
				sh.On = fmt.Sprintf("client %d (%s)", e.Client, nodes[c.cluster].name)
			case "leader-lost":
				lossAt = time.Now()
				for _, r := range byName[e.Node].replicas {
					if r.leading() {
						r.nc.Close() // abrupt: no resignation, nothing answered
						break
					}
				}
				sh.On = e.Node
			case "cut", "restore":
				if err := byName[e.Node].setLeaf(e.What == "cut"); err != nil {
					return err
				}
				sh.On = e.Node + " ↔ " + byName[e.Node].parent
			}
			out.Shifts = append(out.Shifts, sh)
		}
		// Random walk of the wants from 14, reverting to treeMean.
		if now >= nextStep {
			nextStep += simStep
			out.series.steps = append(out.series.steps, now.Seconds())
			for _, c := range clients {
				c.base = math.Max(1, math.Min(40, c.base+rng.NormFloat64()*1.5+0.1*(treeMean-c.base)))
				_ = c.l.SetWants(c.wants())
			}
		}
		out.sample(now, nodes, clients, mon)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.RunS = time.Since(start).Seconds()
	mon.mu.Lock()
	evs := slices.Clone(mon.events)
	mon.mu.Unlock()
	out.analyze(evs)
	if !lossAt.IsZero() {
		for _, ev := range evs { // sorted by arrival
			if ev.arrival > lossAt.UnixNano() && ev.level == 1 && byName[ev.who].parent == sc.ReplicaNode {
				out.FailoverS = time.Duration(ev.arrival - lossAt.UnixNano()).Seconds()
				break
			}
		}
	}
	return out, nil
}
