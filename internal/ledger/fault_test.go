package ledger

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// The fault model: a node whose leaders use this package, a store that
// fails writes, loses the record (delete, or the whole bucket), or has it
// edited, leaders that crash (a successor starts from whatever the store
// holds), writes that land late, and clients that come and go. After
// every step the leases clients hold (as they were answered, unexpired)
// must sum to at most the capacity, and once the faults stop the
// capacity must be handed out again.

type simStore struct {
	rec     *allotpb.LeaseHorizon // nil: no record
	prev    *allotpb.LeaseHorizon // the revision before rec
	written int64                 // when rec was stored
	marker  bool                  // a delete marker is left
	founded bool                  // the election knows the node had a leader
	failing bool                  // writes fail
}

// prior is what a new leader reads.
func (s *simStore) prior(termBound uint64) Prior {
	switch {
	case s.rec != nil:
		return Prior{Kind: PriorRecord, Record: proto.Clone(s.rec).(*allotpb.LeaseHorizon), TermBound: termBound,
			WrittenAt: s.written, Previous: s.prev}
	case s.marker || s.founded:
		return Prior{Kind: PriorMissing}
	}
	return Prior{Kind: PriorNew}
}

type simClient struct {
	id     string
	wants  float64
	has    float64 // as answered
	expiry int64
	safe   float64 // safe capacity as answered: used once the lease ends
	// safeUntil is when the safe capacity ends, as answered (0: never,
	// the protocol before floors).
	safeUntil int64
	next      int64 // when it asks again
	// off is how far its clock is behind the coordinators' (at most the
	// clock skew): it uses what it holds that much longer.
	off int64
}

// inForce is what an agent in Safe mode may use at now: its lease while
// it lasts, then its safe capacity until that ends.
func (c *simClient) inForce(now int64) float64 {
	now -= c.off
	switch {
	case c.expiry > now:
		return c.has
	case c.safeUntil == 0 || c.safeUntil > now:
		return c.safe
	}
	return 0
}

// answered installs a reply's lease.
func (c *simClient) answered(ls Lease) {
	c.has, c.expiry, c.safe, c.safeUntil = ls.Capacity, ls.Expiry, ls.SafeCapacity, ls.SafeExpiry
}

type simNode struct {
	t        *testing.T
	rng      *rand.Rand
	set      *config.Set
	capacity float64
	store    simStore
	term     uint64
	l        *Ledger
	inflight *Proposal // handed to the store, not yet landed
	lostAck  bool      // the next write lands, but the leader hears it failed
	clients  []*simClient
	now      int64
	log      []string
	// lossy: some replies never reach their client, which keeps what it
	// held (and reports it next time).
	lossy bool
}

func (n *simNode) elect() {
	n.term++
	n.l = New(Config{HolderKey: termHolderKey(n.term), Node: "n", ServerID: fmt.Sprint("s", n.term), Term: n.term, ClockSkew: time.Second})
	n.inflight = nil
	for attempt := 0; ; attempt++ {
		p, err := n.l.Start(n.now, n.store.prior(n.term))
		if err != nil {
			n.t.Fatalf("term %d: start: %v", n.term, err)
		}
		// The takeover write must land before serving; if the store
		// fails, the candidate does not serve (tries again later).
		if n.store.failing {
			n.now += int64(500 * time.Millisecond)
			n.expireAll()
			if n.rng == nil || n.rng.IntN(4) == 0 {
				n.store.failing = false // the store comes back
			}
			if attempt > 100 {
				n.t.Fatal("no takeover in 100 attempts")
			}
			continue
		}
		n.land(p)
		n.l.Commit(n.now, p, nil)
		n.store.founded = true
		return
	}
}

// land stores p's record (the store's side of a successful write).
func (n *simNode) land(p *Proposal) {
	n.store.put(proto.Clone(p.Record).(*allotpb.LeaseHorizon), n.now)
}

func (s *simStore) put(rec *allotpb.LeaseHorizon, now int64) {
	s.prev, s.rec, s.written, s.marker = s.rec, rec, now, false
}

func (n *simNode) expireAll() {}

// clockOff is a new client's clock offset: none, but for lossy nodes,
// where it lags by up to the clock skew (1 s).
func (n *simNode) clockOff() int64 {
	if !n.lossy {
		return 0
	}
	return int64(n.rng.IntN(1001)) * int64(time.Millisecond)
}

// round lets due clients ask and answers them like the coordinator.
func (n *simNode) round() {
	var asked []*simClient
	var slots [][]Slot
	for _, c := range n.clients {
		if c.next > n.now {
			continue
		}
		req := &allotpb.GetCapacityRequest{ClientId: c.id, Resource: []*allotpb.ResourceRequest{{
			ResourceId: "r", Wants: c.wants, Has: c.report(n.now), Safe: c.reportSafe(n.now),
		}}}
		s, err := n.l.Get(n.now, n.set, req)
		if err != nil {
			n.t.Fatal(err)
		}
		asked = append(asked, c)
		slots = append(slots, s)
	}
	if p := n.l.Propose(n.now); p != nil {
		n.inflight = p
	}
	n.l.Allocate(n.now)
	for k, c := range asked {
		if !Ready(slots[k]) {
			c.next = n.now + int64(100*time.Millisecond) // waits; modelled as asking again
			continue
		}
		if !n.lossy || n.rng.IntN(6) > 0 {
			c.answered(slots[k][0].Lease(n.now))
		}
		c.next = n.now + int64(max(c.refreshOf(slots[k][0].Lease(n.now)), 50*time.Millisecond))
	}
	n.l.EndRound()
	checkLedger(n.t, n.l, n.now)
}

// finishWrite lands or fails the write in flight.
func (n *simNode) finishWrite() {
	p := n.inflight
	if p == nil {
		return
	}
	n.inflight = nil
	if n.store.failing {
		n.l.Commit(n.now, p, fmt.Errorf("injected failure"))
		return
	}
	n.land(p)
	if n.lostAck {
		n.lostAck = false
		n.l.Commit(n.now, p, fmt.Errorf("injected time-out after the write landed"))
		return
	}
	n.l.Commit(n.now, p, nil)
}

// held is the capacity in force: each client's lease while it lasts,
// then its safe capacity until that ends (an agent in Safe mode).
func (n *simNode) held() float64 {
	sum := 0.0
	for _, c := range n.clients {
		sum += c.inForce(n.now)
	}
	return sum
}

// refreshOf is the refresh interval a reply asks for.
func (c *simClient) refreshOf(ls Lease) time.Duration { return ls.Refresh }

// report is what an agent says of its lease: the last one it got, also
// once it has expired (a successor counts it heard).
func (c *simClient) report(now int64) *allotpb.Lease {
	if c.expiry != 0 {
		return &allotpb.Lease{Capacity: c.has, ExpiryTime: timestamppb.New(time.Unix(0, c.expiry))}
	}
	return nil
}

// reportSafe is what an agent says of its safe capacity: what it falls
// back to, and until when.
func (c *simClient) reportSafe(now int64) *allotpb.Lease {
	if c.safe > 0 && c.safeUntil > now-c.off {
		return &allotpb.Lease{Capacity: c.safe, ExpiryTime: timestamppb.New(time.Unix(0, c.safeUntil))}
	}
	return nil
}

func TestFaultsNeverOverGrant(t *testing.T) {
	t.Parallel()
	for seed := range uint64(faultSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { faultTrial(t, seed, true) })
	}
}

// TestFailoversNeverOverGrant: the same without damage to the record, so
// that successors mostly take over from a sound record with a holder
// promise, and with leaders crashing more often, some right after a
// newcomer's first grant.
func TestFailoversNeverOverGrant(t *testing.T) {
	t.Parallel()
	for seed := range uint64(faultSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { faultTrial(t, seed+1000, false) })
	}
}

// TestLossyFailoversNeverOverGrant: failovers again, with replies lost
// (a client keeps what it held and reports it) and clients whose clocks
// lag the coordinators' by up to the clock skew, so that successors hear
// promised holders whose leases and floors end within the skew of the
// takeover.
func TestLossyFailoversNeverOverGrant(t *testing.T) {
	t.Parallel()
	for seed := range uint64(faultSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { faultTrial(t, seed+2000, false) })
	}
}

// faultTrial runs one random history; tamper adds deleted, edited and
// forged records.
func faultTrial(t *testing.T, seed uint64, tamper bool) {
	rng := rand.New(rand.NewPCG(seed, 99))
	capacity := float64(20 + rng.IntN(200))
	tm := &config.Template{Name: "t", Glob: "*", Capacity: capacity, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 3 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 3 * time.Second,
		Floor: config.FloorPolicy{Share: 0.5, Lease: 8 * time.Second}}
	n := &simNode{t: t, rng: rng, set: config.NewSet(1, []*config.Template{tm}, nil), capacity: capacity, now: int64(1e18), lossy: seed >= 2000}
	for i := range 3 + rng.IntN(8) {
		n.clients = append(n.clients, &simClient{id: fmt.Sprint("c", i), wants: rng.Float64() * capacity / 2, off: n.clockOff()})
	}
	n.elect()
	tail := 0.0
	const steps = 1500
	crashAt := -1
	for step := range steps {
		if step == crashAt {
			n.elect()
		}
		n.now += int64(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		n.expireAll()
		faults := step < steps-400 // a quiet end, to check recovery
		if faults {
			ev := rng.IntN(200)
			if !tamper && ev >= 3 && ev <= 6 {
				ev = 9 + ev%2 // a newcomer instead
			}
			if ev < 10 {
				n.log = append(n.log, fmt.Sprintf("step %d t=%dms event %d failing=%v", step, (n.now-1e18)/1e6, ev, n.store.failing))
			}
			switch ev {
			case 0, 1, 2:
				n.store.failing = !n.store.failing
			case 3:
				n.store.rec, n.store.marker = nil, true // kv delete
			case 4:
				n.store.rec, n.store.marker = nil, false // bucket deleted
			case 5:
				// An edit: a past horizon, claiming completeness.
				n.store.put(&allotpb.LeaseHorizon{Term: n.term, ServerId: "someone", Complete: true,
					Horizon: timestamppb.New(time.Unix(0, n.now-int64(time.Hour)))}, n.now)
			case 6:
				// A forged term no election can have issued.
				n.store.put(&allotpb.LeaseHorizon{Term: math.MaxUint64, Complete: true,
					Horizon: timestamppb.New(time.Unix(0, n.now))}, n.now)
			case 7, 8:
				n.elect() // the leader crashes; a successor takes over
			case 9, 10:
				n.clients = append(n.clients, &simClient{id: fmt.Sprint("n", step), wants: rng.Float64() * capacity, off: n.clockOff()})
				if ev == 10 {
					// The leader crashes soon after a newcomer's first
					// grant: a successor must not take the predecessor's
					// holder promise as a list of every lease.
					crashAt = step + 1 + rng.IntN(4)
				}
			case 11:
				n.lostAck = true // the next write lands but is reported failed
			case 12, 13:
				// A client is cut off from every coordinator for a while,
				// longer than its lease and its floor: it runs on its
				// floor until that ends, then on nothing, and must be
				// counted as long as it may use anything.
				c := n.clients[rng.IntN(len(n.clients))]
				quiet := n.now + int64(time.Duration(steps-400-step)*20*time.Millisecond)
				c.next = max(c.next, min(n.now+int64(time.Duration(1+rng.IntN(60))*time.Second), quiet))
			}
		} else {
			n.store.failing = false
		}
		// The serving leader checks its record now and then (the
		// coordinator reads it back every few seconds).
		if step%25 == 0 && (n.store.rec == nil || Judge(n.store.rec, n.term, n.l.cfg.ServerID, n.term) != VerdictOurs) {
			if n.store.rec != nil && Judge(n.store.rec, n.term, n.l.cfg.ServerID, n.term) == VerdictNewer {
				t.Fatalf("step %d: a newer term in a single-leader model", step)
			}
			n.l.Rewrite()
			if p := n.l.Sweep(n.now); p != nil {
				n.inflight = p
			}
		}
		if rng.IntN(3) == 0 {
			n.finishWrite() // writes land one or more steps late
		}
		n.round()
		if step%10 == 0 && n.inflight == nil {
			if p := n.l.Sweep(n.now); p != nil {
				n.inflight = p
			}
		}
		if step >= steps-100 {
			tail = max(tail, n.held())
		}
		if h := n.held(); h > capacity*(1+1e-9)+1e-9 {
			if r := n.l.resources["r"]; r != nil {
				for _, c := range r.clients.all() {
					t.Logf("ledger: %s has %v until %dms lapsed %v held %v until %dms floor %v until %dms prev %v until %dms", c.id, c.has, (c.expiry-1e18)/1e6, c.lapsed,
						c.held, (c.heldUntil-1e18)/1e6, c.floor, (c.floorEnd-1e18)/1e6, c.floorPrev, (c.floorPrevEnd-1e18)/1e6)
				}
				t.Logf("ledger: ceiling %v learning until %dms pred %v credited %v floors %+v", r.ceiling, (r.learningUntil-1e18)/1e6, r.predCeiling, r.credited, r.floors)
			}
			for _, c := range n.clients {
				t.Logf("%s has %v until %dms safe %v until %dms in force %v wants %v", c.id, c.has, (c.expiry-1e18)/1e6, c.safe, (c.safeUntil-1e18)/1e6, c.inForce(n.now), c.wants)
			}
			t.Fatalf("step %d t=%dms term %d: clients hold %v of capacity %v; events:\n%s", step, (n.now-1e18)/1e6, n.term, h, capacity, strings.Join(n.log, "\n"))
		}
	}
	total := 0.0
	for _, c := range n.clients {
		total += c.wants
	}
	if want := math.Min(total, capacity); tail < want*0.99 {
		r := n.l.resources["r"]
		for _, c := range r.clients.all() {
			t.Logf("ledger: %s has %v until %dms held %v until %dms", c.id, c.has, (c.expiry-1e18)/1e6, c.held, (c.heldUntil-1e18)/1e6)
		}
		t.Logf("ledger: inflight %v (sim %v) retry %dms wait %d batch %d", n.l.rec.inflight != nil, n.inflight != nil, (n.l.rec.retryAt-1e18)/1e6, r.waitSince, len(r.batch))
		for _, c := range r.clients.all() {
			r.upsert(c.id, 50, 1, 0, holding{}, n.now)
		}
		ps, raise, _ := n.l.needs(n.now, r, n.l.rec.until)
		t.Logf("needs: %+v %v bound %v unlisted %v published %v", ps, raise, r.bound(n.now), r.unlisted, r.published)
		t.Logf("ledger: ceiling %v until %dms, horizon %dms, learning until %dms pred %v credited %v; store %+v",
			r.ceiling, (r.ceilingExpiry-1e18)/1e6, (n.l.rec.until-1e18)/1e6, (r.learningUntil-1e18)/1e6, r.predCeiling, r.credited, n.store)
		for _, c := range n.clients {
			t.Logf("%s has %v until %dms wants %v", c.id, c.has, (c.expiry-1e18)/1e6, c.wants)
		}
		t.Fatalf("after the faults stopped, clients hold at most %v; want %v (capacity %v)", tail, want, capacity)
	}
}

// TestSafeCapacityCountsLapsedClients: when a leader cannot record and
// its leases end, each client is told a safe capacity that divides the
// capacity among every client that may be using it, not just those of
// the round (dividing among the round's clients only once put 600 in
// force against 60).
func TestSafeCapacityCountsLapsedClients(t *testing.T) {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 60, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 5 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 5 * time.Second,
		Floor: config.FloorPolicy{Share: 1, Lease: time.Minute}}
	n := &simNode{t: t, set: config.NewSet(1, []*config.Template{tm}, nil), capacity: 60, now: int64(1e18)}
	for i := range 10 {
		n.clients = append(n.clients, &simClient{id: fmt.Sprint("c", i), wants: 10})
	}
	n.elect()
	n.store.failing = true
	safe := map[string]*simClient{}
	for range 400 {
		n.now += int64(50 * time.Millisecond)
		n.expireAll()
		n.finishWrite()
		for _, c := range n.clients {
			if c.next > n.now {
				continue
			}
			s, err := n.l.Get(n.now, n.set, &allotpb.GetCapacityRequest{ClientId: c.id, Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: c.wants,
				Has: c.report(n.now), Safe: c.reportSafe(n.now)}}})
			if err != nil {
				t.Fatal(err)
			}
			if p := n.l.Propose(n.now); p != nil {
				n.inflight = p
			}
			n.l.Allocate(n.now)
			if Ready(s) {
				ls := s[0].Lease(n.now)
				c.answered(ls)
				safe[c.id] = c
				c.next = n.now + int64(ls.Refresh)
			} else {
				c.next = n.now + int64(100*time.Millisecond)
			}
			n.l.EndRound()
			checkLedger(t, n.l, n.now)
			if sum := n.held(); sum > 60*(1+1e-9) {
				t.Fatalf("capacity in force %v of 60", sum)
			}
		}
	}
	if len(safe) != 10 {
		t.Fatalf("%d clients answered", len(safe))
	}
}

// faultSeeds is how many random fault histories TestFaultsNeverOverGrant
// explores; raise it locally to search further.
const faultSeeds = 60

// A grant that needs a raise waits for the write, but never longer than
// MaxRecordWait: then it is made within what is recorded. Grants within
// the recorded bounds never wait.
func TestRecordWaitIsBounded(t *testing.T) {
	h := newHolderHarness(t, 1, int64(1e18), Prior{Kind: PriorNew})
	l, now := h.l, h.now
	var p *Proposal
	ask := func(id string, wants float64) []Slot {
		h.now = now
		return h.enqueue(id, wants)
	}
	// First grant: the resource must be listed first.
	a := ask("a", 30)
	prop := l.Propose(now)
	if prop == nil {
		t.Fatal("no record proposed for a new resource")
	}
	l.Allocate(now)
	if Ready(a) {
		t.Fatal("granted before the record listing the resource was durable")
	}
	l.EndRound()
	l.Commit(now, prop, nil)
	l.Propose(now)
	l.Allocate(now)
	if !Ready(a) || a[0].Lease(now).Capacity != 30 {
		t.Fatalf("after the write: ready %v, lease %+v", Ready(a), a[0].Lease(now))
	}
	l.EndRound()
	// Within the recorded ceiling (30 + headroom 10), but a new client: it
	// waits for a record that lists it among the holders, not for a raise.
	now += int64(time.Millisecond)
	b := ask("b", 5)
	p = l.Propose(now)
	if p == nil {
		t.Fatal("a new client did not wait for a record listing it")
	}
	if e := p.Record.GetResources()["r"]; e.GetCeiling() != 40 || e.GetHolders() != 2 {
		t.Fatalf("the new client's record raised the ceiling or missed it: %v", e)
	}
	l.Allocate(now)
	if Ready(b) {
		t.Fatal("a new client was granted before a record listed it")
	}
	l.EndRound()
	l.Commit(now, p, nil)
	// A returning client within the ceiling never waits.
	if p := l.Propose(now); p != nil {
		t.Fatalf("a grant within the ceiling proposed a write: %v", p.Record)
	}
	l.Allocate(now)
	if !Ready(b) || b[0].Lease(now).Capacity != 5 {
		t.Fatalf("b: %+v", b[0].Lease(now))
	}
	l.EndRound()
	ask("a", 30)
	if p := l.Propose(now); p != nil {
		t.Fatalf("a grant within the ceiling proposed a write: %v", p.Record)
	}
	l.Allocate(now)
	l.EndRound()
	// Rounds every 100 ms until slots are answered; writes never land.
	untilReady := func(slots []Slot) {
		t.Helper()
		for step := 0; !Ready(slots); step++ {
			if step > 100 {
				t.Fatal("still waiting after 100 rounds")
			}
			now += int64(100 * time.Millisecond)
			l.Propose(now)
			l.Allocate(now)
			l.EndRound()
		}
	}
	// Above it: waits for a write that never lands, then is granted what
	// the recorded ceiling leaves (40 − 35).
	c := ask("a", 80)
	if l.Propose(now) == nil {
		t.Fatal("no raise proposed")
	}
	l.Allocate(now)
	l.EndRound()
	untilReady(c)
	if waited := time.Duration(now - 1e18); waited > DefaultMaxRecordWait+200*time.Millisecond {
		t.Fatalf("waited %v", waited)
	}
	if got := c[0].Lease(now).Capacity; got != 35 {
		t.Fatalf("a got %v; the recorded ceiling leaves it 35", got)
	}
	// A new client while writes never land: answered after the bounded
	// wait with nothing (the record promises that only a and b hold
	// leases), then granted within the ceiling once the promise lapses.
	d := ask("d", 10)
	start := now
	untilReady(d)
	if waited := time.Duration(now - start); waited > DefaultMaxRecordWait+200*time.Millisecond {
		t.Fatalf("d waited %v", waited)
	}
	if got := d[0].Lease(now).Capacity; got != 0 {
		t.Fatalf("d got %v while the record's holder promise excludes it", got)
	}
	// The promise lasts as long as a successor may learn (the record's
	// latest expiry plus twice the clock skew), no longer.
	r := l.resources["r"]
	if r.mayHold("d", now) || r.hold.until > r.ceilingExpiry+2*int64(l.cfg.ClockSkew) || !r.mayHold("d", r.hold.until) {
		t.Fatalf("the holder promise (until %+dms, latest expiry %+dms, skew %v) does not bind until it lapses, and only until then",
			(r.hold.until-now)/1e6, (r.ceilingExpiry-now)/1e6, l.cfg.ClockSkew)
	}
}

func TestPlausible(t *testing.T) {
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(time.Unix(1_000_000, 0).Add(d)) }
	written := time.Unix(1_000_000, 0).UnixNano()
	rec := func(term uint64, hz time.Duration) *allotpb.LeaseHorizon {
		return &allotpb.LeaseHorizon{Term: term, Horizon: at(hz)}
	}
	for _, tc := range []struct {
		name    string
		rec     *allotpb.LeaseHorizon
		written int64
		prev    *allotpb.LeaseHorizon
		ok      bool
	}{
		{"horizon after the write", rec(3, time.Minute), written, nil, true},
		{"horizon at the write", rec(3, 0), written, nil, true},
		{"write time unknown", rec(3, -time.Hour), 0, nil, true},
		{"horizon an hour before the write", rec(3, -time.Hour), written, nil, false},
		{"within the skew", rec(3, -2*time.Second), written, nil, true},
		{"same term, horizon lowered", rec(3, time.Minute), 0, rec(3, time.Hour), false},
		{"same term, horizon raised", rec(3, time.Hour), 0, rec(3, time.Minute), true},
		{"newer term, lower horizon", rec(4, time.Minute), 0, rec(3, time.Hour), true},
		{"older term after newer", rec(2, time.Hour), 0, rec(3, time.Minute), false},
	} {
		why := Plausible(tc.rec, tc.written, tc.prev, 2*time.Second)
		if (why == "") != tc.ok {
			t.Errorf("%s: Plausible = %q, want ok=%v", tc.name, why, tc.ok)
		}
	}
}
