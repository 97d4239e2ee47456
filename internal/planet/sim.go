package planet

import (
	"container/heap"
	crand "crypto/rand"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/proto/allotpb"
)

const (
	resourceID = "r"
	// askTimeout is how long a child waits for its parent's answer before
	// it may ask again (the coordinator's upstream time-out).
	askTimeout = int64(2 * time.Second)
	// retryGap is when a client whose first request waited (its cluster
	// had no lease yet) asks again.
	retryGap = int64(50 * time.Millisecond)
	minGap   = 50 * time.Millisecond
	// waveStep: demand changes in steps (an agent's estimate as it
	// reports it), not at every instant.
	waveStep = int64(30 * time.Second)
)

// grant is what a claimant was told: a lease until expiry, then its floor
// (safe capacity) until safeUntil (0: no end).
type grant struct {
	cap, safe         float64
	expiry, safeUntil int64
}

func (g *grant) inForce(now int64) float64 {
	switch {
	case g.expiry > now:
		return g.cap
	case g.safeUntil == 0 || g.safeUntil > now:
		return g.safe
	}
	return 0
}

func grantOf(ls ledger.Lease) grant {
	return grant{cap: ls.Capacity, expiry: ls.Expiry, safe: ls.SafeCapacity, safeUntil: ls.SafeExpiry}
}

type client struct {
	id   string
	base float64 // wants at a wave factor of 1
	g    grant
	next int64 // when it asks again
}

// node is one coordinator: its ledger, its link to its parent, and (for a
// cluster) its clients.
type node struct {
	name   string
	level  int // 0 root, 1 region, 2 cluster
	region int
	cfg    ledger.Config
	l      *ledger.Ledger
	rec    *allotpb.LeaseHorizon // the last committed record
	parent *node
	lat    int64 // one-way latency to the parent
	// The child's side of its link: the most urgent ask wanted since the
	// last, the regular and last asks, an ask in flight until.
	wanted           ledger.Ask
	nextAsk, lastAsk int64
	busyUntil        int64
	up               grant // what the parent last told it
	clients          []client
	due              dueHeap
	err              error // the first ledger error (the run fails)
	gets             int64
	// Of gets, those answered with the shortest refresh: the client's
	// grant shrank, or the cluster passed on its own short refresh.
	confirms, inherited int64
}

// newNode makes a node whose children each stand for up to childClients
// clients (the parent's bound on a child's claim, set near what is
// expected behind it as docs/tree.md advises).
func newNode(name string, level, region int, parent *node, childClients int64, now int64) (*node, error) {
	n := &node{name: name, level: level, region: region, parent: parent,
		cfg: ledger.Config{Node: name, ServerID: name, Term: 1, Child: parent != nil, MinRefresh: minGap,
			MaxClients: 4_000_000, ChildMaxClients: childClients}}
	return n, n.start(now, ledger.Prior{Kind: ledger.PriorNew})
}

// start makes a leader of the node's current term from prior.
func (n *node) start(now int64, prior ledger.Prior) error {
	crand.Read(n.cfg.HolderKey[:]) // a key of its own per term, as a coordinator draws
	n.l = ledger.New(n.cfg)
	p, err := n.l.Start(now, prior)
	if err != nil {
		return fmt.Errorf("planet: %s term %d: start: %w", n.name, n.cfg.Term, err)
	}
	n.l.Commit(now, p, nil)
	n.rec = p.Record
	return nil
}

// failover replaces the leader by a successor of the next term that
// starts from the last committed record.
func (n *node) failover(now int64) error {
	n.cfg.Term++
	n.cfg.ServerID = fmt.Sprint(n.name, "-", n.cfg.Term)
	return n.start(now, ledger.Prior{Kind: ledger.PriorRecord, Record: n.rec})
}

// settle proposes, stores at once and allocates; a child notes whether to
// ask its parent soon, as the coordinator does before allocating.
func (n *node) settle(now int64) {
	for range 2 {
		if p := n.l.Propose(now); p != nil {
			n.l.Commit(now, p, nil)
			n.rec = p.Record
		}
	}
	if n.parent != nil {
		n.wanted = max(n.wanted, n.l.UpstreamWanted(now))
	}
	n.l.Allocate(now)
}

// sweep runs the periodic sweep (the coordinator's, every second).
func (n *node) sweep(now int64) {
	if p := n.l.Sweep(now); p != nil {
		n.l.Commit(now, p, nil)
		n.rec = p.Record
	}
}

// scratch is one worker's reusable request (the ledger keeps nothing of
// it), so a million clients' refreshes do not allocate a request each.
type scratch struct {
	req        *allotpb.GetCapacityRequest
	rr         *allotpb.ResourceRequest
	has, safe  *allotpb.Lease
	hasT, safT *timestamppb.Timestamp
	asked      []int32
	slots      [][]ledger.Slot
	out        []*msg
}

func newScratch() *scratch {
	s := &scratch{rr: &allotpb.ResourceRequest{ResourceId: resourceID}, has: &allotpb.Lease{}, safe: &allotpb.Lease{},
		hasT: &timestamppb.Timestamp{}, safT: &timestamppb.Timestamp{}}
	s.req = &allotpb.GetCapacityRequest{Resource: []*allotpb.ResourceRequest{s.rr}}
	s.has.ExpiryTime, s.safe.ExpiryTime = s.hasT, s.safT
	return s
}

func setTime(ts *timestamppb.Timestamp, ns int64) {
	ts.Seconds, ts.Nanos = ns/1e9, int32(ns%1e9)
}

// fill makes the request of client c wanting w: its wants, and what it
// holds (its last lease, also once expired, and its floor while it lasts).
func (s *scratch) fill(c *client, w float64, now int64) {
	s.req.ClientId = c.id
	s.rr.Wants, s.rr.Has, s.rr.Safe = w, nil, nil
	if c.g.expiry != 0 {
		s.has.Capacity = c.g.cap
		setTime(s.hasT, c.g.expiry)
		s.rr.Has = s.has
	}
	if c.g.safe > 0 && c.g.safeUntil > now {
		s.safe.Capacity = c.g.safe
		setTime(s.safT, c.g.safeUntil)
		s.rr.Safe = s.safe
	}
}

// clientRound answers the cluster's due clients in one round, as the
// coordinator does.
func (s *sim) clientRound(n *node, now int64, sc *scratch) {
	sc.asked, sc.slots = sc.asked[:0], sc.slots[:0]
	f := s.wave(n.region, now)
	for n.due.Len() > 0 && n.clients[n.due.ids[0]].next <= now {
		i := heap.Pop(&n.due).(int32)
		c := &n.clients[i]
		sc.fill(c, c.base*f, now)
		slots, err := n.l.Get(now, s.set, sc.req)
		if err != nil {
			n.err = fmt.Errorf("planet: %s: get for %s: %w", n.name, c.id, err)
			return
		}
		sc.asked, sc.slots = append(sc.asked, i), append(sc.slots, slots)
	}
	if len(sc.asked) == 0 {
		return
	}
	n.gets += int64(len(sc.asked))
	n.settle(now)
	for k, i := range sc.asked {
		c := &n.clients[i]
		switch {
		case !sc.slots[k][0].Served():
			n.err = fmt.Errorf("planet: %s: %s refused: %s", n.name, c.id, sc.slots[k][0].Err)
			return
		case !ledger.Ready(sc.slots[k]):
			c.next = now + retryGap
		default:
			ls := sc.slots[k][0].Lease(now)
			if ls.Refresh <= minGap {
				if ls.Capacity < c.g.cap {
					n.confirms++ // its own shrink, to confirm
				} else {
					n.inherited++ // the cluster's own short refresh, passed on
				}
			}
			c.g = grantOf(ls)
			c.next = now + int64(max(ls.Refresh, minGap))
		}
		heap.Push(&n.due, i)
	}
	n.l.EndRound()
}

// maybeAsk sends the node's demand to its parent when it is due: every
// refresh interval the parent gave, at once for a first lease, and soon
// (at most eight times per interval) when demand grew or the subtree gave
// back; one ask at a time, given up after askTimeout.
func (n *node) maybeAsk(now int64) *msg {
	if n.parent == nil || n.busyUntil > now {
		return nil
	}
	refresh := int64(n.l.UpstreamRefresh())
	if now < n.nextAsk && n.wanted != ledger.AskNow && (n.wanted != ledger.AskSoon || now-n.lastAsk < refresh/8) {
		return nil
	}
	reqs := n.l.UpstreamRequests(now, n.name)
	if len(reqs) == 0 {
		return nil
	}
	n.wanted = ledger.AskLater
	n.lastAsk, n.nextAsk, n.busyUntil = now, now+refresh, now+askTimeout
	return &msg{at: now + n.lat, from: n, to: n.parent, reqs: reqs}
}

// serve answers a child's requests at the parent, one round each.
func (p *node) serve(now int64, set *config.Set, reqs []*allotpb.GetServerCapacityRequest) (*allotpb.GetServerCapacityResponse, error) {
	resp := &allotpb.GetServerCapacityResponse{Term: p.cfg.Term}
	for _, req := range reqs {
		slots, err := p.l.ServerGet(now, set, req)
		if err != nil {
			return nil, fmt.Errorf("planet: %s: server get from %s: %w", p.name, req.GetServerId(), err)
		}
		p.settle(now)
		for _, s := range slots {
			if !s.Served() || !ledger.ReadyServer([]ledger.ServerSlot{s}) {
				continue
			}
			ls := s.Lease(now)
			rr := &allotpb.ServerCapacityResourceResponse{ResourceId: ls.ResourceID,
				Gets: &allotpb.Lease{Capacity: ls.Capacity, ExpiryTime: timestamppb.New(time.Unix(0, ls.Expiry)),
					RefreshInterval: durationpb.New(ls.Refresh)},
				SafeCapacity: ls.SafeCapacity, Pace: durationpb.New(ls.Pace)}
			if ls.SafeExpiry != 0 {
				rr.SafeExpiryTime = timestamppb.New(time.Unix(0, ls.SafeExpiry))
			}
			resp.Response = append(resp.Response, rr)
		}
		p.l.EndRound()
	}
	return resp, nil
}

// answered installs the parent's answer at the child.
func (n *node) answered(now int64, resp *allotpb.GetServerCapacityResponse) {
	n.busyUntil = 0
	if !n.l.SetUpstream(now, resp) {
		return
	}
	for _, rr := range resp.GetResponse() {
		if rr.GetResourceId() != resourceID {
			continue
		}
		g := grant{cap: rr.GetGets().GetCapacity(), expiry: rr.GetGets().GetExpiryTime().AsTime().UnixNano(), safe: rr.GetSafeCapacity()}
		if e := rr.GetSafeExpiryTime(); e != nil {
			g.safeUntil = e.AsTime().UnixNano()
		}
		n.up = g
	}
}

// msg is a message on a WAN link: a child's requests, or (resp set) the
// parent's answer.
type msg struct {
	at       int64
	seq      int64
	from, to *node
	reqs     []*allotpb.GetServerCapacityRequest
	resp     *allotpb.GetServerCapacityResponse
}

type msgQueue []*msg

func (q msgQueue) Len() int { return len(q) }
func (q msgQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q msgQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *msgQueue) Push(x any)   { *q = append(*q, x.(*msg)) }
func (q *msgQueue) Pop() any {
	old := *q
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return m
}

// dueHeap orders a cluster's clients by when they ask next.
type dueHeap struct {
	ids     []int32
	clients *[]client
}

func (h dueHeap) Len() int { return len(h.ids) }
func (h dueHeap) Less(i, j int) bool {
	return (*h.clients)[h.ids[i]].next < (*h.clients)[h.ids[j]].next
}
func (h dueHeap) Swap(i, j int) { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *dueHeap) Push(x any)   { h.ids = append(h.ids, x.(int32)) }
func (h *dueHeap) Pop() any {
	x := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return x
}

// sim is one run's state.
type sim struct {
	cfg      Config
	set      *config.Set
	start    int64
	root     *node
	regions  []*node
	clusters []*node
	queue    msgQueue
	seq      int64
	scratch  []*scratch
	// Faults: region 0's link to the root is cut in [cutFrom, cutTo); the
	// root's leader is dead in [downFrom, downTo).
	cutFrom, cutTo, downFrom, downTo int64
	// Traffic per level (root, regions) in requests served.
	served [2]int64
	// The root's ledger time, per round and in sweeps.
	rootRounds []time.Duration
	rootSweeps time.Duration
	// Per region, the clients' bases sorted, with prefix sums; per
	// cluster the same (metrics.go).
	shape shape
}

func newSim(cfg Config) (*sim, error) {
	tm := &config.Template{Name: "planet", Glob: "*", Capacity: cfg.Capacity(), Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: cfg.Lease, RefreshInterval: cfg.Refresh, LearningModeDuration: cfg.Lease,
		Floor: config.FloorPolicy{Share: config.DefaultFloorShare, Lease: cfg.FloorLease}}
	s := &sim{cfg: cfg, set: config.NewSet(1, []*config.Template{tm}, nil), start: int64(1e18)}
	now := s.start
	rng := rand.New(rand.NewPCG(cfg.Seed, 21))
	latency := func() int64 {
		return int64(cfg.MinLatency) + rng.Int64N(int64(cfg.MaxLatency-cfg.MinLatency)+1)
	}
	var err error
	if s.root, err = newNode("root", 0, -1, nil, int64(cfg.Clusters*cfg.Clients), now); err != nil {
		return nil, err
	}
	perClient := cfg.Share
	for r := range cfg.Regions {
		region, err := newNode(fmt.Sprint("region-", r), 1, r, s.root, int64(cfg.Clients), now)
		if err != nil {
			return nil, err
		}
		region.lat = latency()
		s.regions = append(s.regions, region)
		for c := range cfg.Clusters {
			cl, err := newNode(fmt.Sprint("cluster-", r, "-", c), 2, r, region, 1, now)
			if err != nil {
				return nil, err
			}
			cl.lat = latency()
			cl.clients = make([]client, cfg.Clients)
			cl.due.clients = &cl.clients
			for k := range cl.clients {
				// Clients start within the first second, wants spread
				// 0.2–1.8× the mean share.
				cl.clients[k] = client{id: fmt.Sprint("c-", r, "-", c, "-", k), base: perClient * (0.2 + 1.6*rng.Float64()),
					next: now + rng.Int64N(int64(time.Second))}
				cl.due.ids = append(cl.due.ids, int32(k))
			}
			heap.Init(&cl.due)
			s.clusters = append(s.clusters, cl)
		}
	}
	s.scratch = make([]*scratch, max(cfg.Workers, 1))
	for i := range s.scratch {
		s.scratch[i] = newScratch()
	}
	s.cutFrom = now + int64(cfg.Warmup)
	s.cutTo = s.cutFrom + int64(cfg.Cut)
	s.downFrom = s.cutTo + int64(cfg.AfterCut)
	s.downTo = s.downFrom + int64(cfg.Outage)
	s.shape = newShape(s)
	return s, nil
}

// wave is the demand factor of a region at now: a global wave (7 min)
// and a regional one (3 min) shifted by region, so that demand both
// rises above the capacity and moves between regions.
func (s *sim) wave(region int, now int64) float64 {
	t := float64((now-s.start)/waveStep*waveStep) / 1e9
	phase := float64(region) / float64(s.cfg.Regions)
	return 1 + 0.3*math.Sin(2*math.Pi*t/420) + 0.3*math.Sin(2*math.Pi*(t/180+phase))
}

// earlyRefresh moves up the next request of every client whose wants
// moved enough at a step of the waves, as the agent does (more than a
// quarter and at least one unit, the agent's bigChange).
func (s *sim) earlyRefresh(now int64) {
	if (now-s.start)%waveStep != 0 {
		return
	}
	for _, n := range s.clusters {
		before, after := s.wave(n.region, now-1), s.wave(n.region, now)
		d := math.Abs(after - before)
		if d <= 0.25*before {
			continue
		}
		moved := false
		for i := range n.clients {
			if c := &n.clients[i]; c.base*d >= 1 && c.next > now {
				c.next, moved = now, true
			}
		}
		if moved {
			heap.Init(&n.due)
		}
	}
}

// linkUp reports whether a message between n and its parent gets through
// at now.
func (s *sim) linkUp(n *node, now int64) bool {
	if n.level == 1 && n.region == 0 && now >= s.cutFrom && now < s.cutTo {
		return false
	}
	return true
}

func (s *sim) send(m *msg) {
	s.seq++
	m.seq = s.seq
	heap.Push(&s.queue, m)
}

// deliver processes the messages due by now in order.
func (s *sim) deliver(now int64) error {
	for len(s.queue) > 0 && s.queue[0].at <= now {
		m := heap.Pop(&s.queue).(*msg)
		child := m.from
		if !s.linkUp(child, m.at) {
			continue // lost on the cut link; the child times out
		}
		if m.resp != nil {
			child.answered(m.at, m.resp)
			continue
		}
		p := m.to
		if p == s.root && m.at >= s.downFrom && m.at < s.downTo {
			continue // nobody leads the root
		}
		began := time.Now()
		resp, err := p.serve(m.at, s.set, m.reqs)
		if p == s.root {
			s.rootRounds = append(s.rootRounds, time.Since(began))
		}
		if err != nil {
			return err
		}
		s.served[p.level] += int64(len(m.reqs))
		s.send(&msg{at: m.at + child.lat, from: child, to: p, resp: resp})
	}
	return nil
}

// tick runs the clusters' rounds and the asks due at now.
func (s *sim) tick(now int64) error {
	if err := s.deliver(now); err != nil {
		return err
	}
	s.earlyRefresh(now)
	w := len(s.scratch)
	var wg sync.WaitGroup
	per := (len(s.clusters) + w - 1) / w
	for k := range w {
		lo, hi := k*per, min((k+1)*per, len(s.clusters))
		sc := s.scratch[k]
		sc.out = sc.out[:0]
		wg.Go(func() {
			for _, n := range s.clusters[lo:hi] {
				s.clientRound(n, now, sc)
				if m := n.maybeAsk(now); m != nil {
					sc.out = append(sc.out, m)
				}
			}
		})
	}
	wg.Wait()
	for _, sc := range s.scratch {
		for _, m := range sc.out {
			s.send(m)
		}
	}
	for _, n := range s.clusters {
		if n.err != nil {
			return n.err
		}
	}
	for _, n := range s.regions {
		if m := n.maybeAsk(now); m != nil {
			s.send(m)
		}
	}
	return nil
}

// sweepAll runs every node's periodic sweep; the root's is timed.
func (s *sim) sweepAll(now int64) {
	for _, n := range s.clusters {
		n.sweep(now)
	}
	for _, n := range s.regions {
		n.sweep(now)
	}
	if now < s.downFrom || now >= s.downTo {
		began := time.Now()
		s.root.sweep(now)
		s.rootSweeps += time.Since(began)
	}
}
