package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// holderHarness drives a ledger through whole rounds, committing every
// proposal at once, and remembers the last committed record.
type holderHarness struct {
	t    *testing.T
	l    *Ledger
	set  *config.Set
	now  int64
	last *allotpb.LeaseHorizon
}

func newHolderHarness(t *testing.T, term uint64, now int64, prior Prior) *holderHarness {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 10 * time.Second}
	h := &holderHarness{t: t, l: New(Config{HolderKey: termHolderKey(term), Node: "n", ServerID: "s", Term: term}),
		set: config.NewSet(1, []*config.Template{tm}, nil), now: now}
	p, err := h.l.Start(now, prior)
	if err != nil {
		t.Fatal(err)
	}
	h.commit(p)
	return h
}

func (h *holderHarness) commit(p *Proposal) {
	if p != nil {
		h.l.Commit(h.now, p, nil)
		h.last = proto.Clone(p.Record).(*allotpb.LeaseHorizon)
	}
}

// enqueue has client id ask for wants of resource r in the next round,
// without running it.
func (h *holderHarness) enqueue(id string, wants float64) []Slot {
	h.t.Helper()
	s, err := h.l.Get(h.now, h.set, &allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: wants}}})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// ask has client id ask for wants, reporting the lease has (expiring in
// 10 s) if positive, and returns what it is granted.
func (h *holderHarness) ask(id string, wants, has float64) float64 {
	h.t.Helper()
	rr := &allotpb.ResourceRequest{ResourceId: "r", Wants: wants}
	if has > 0 {
		rr.Has = &allotpb.Lease{Capacity: has, ExpiryTime: timestamppb.New(time.Unix(0, h.now+int64(10*time.Second)))}
	}
	slots, err := h.l.Get(h.now, h.set, &allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{rr}})
	if err != nil {
		h.t.Fatal(err)
	}
	for step := 0; ; step++ {
		if step > 20 {
			h.t.Fatalf("%s not answered", id)
		}
		h.commit(h.l.Propose(h.now))
		h.l.Allocate(h.now)
		h.l.EndRound()
		if Ready(slots) {
			return slots[0].Lease(h.now).Capacity
		}
		h.now += int64(10 * time.Millisecond)
	}
}

// A successor that hears from exactly the holders its predecessor promised
// ends learning at once: a newcomer gets all the rest of the capacity,
// not the rest minus the predecessor's ceiling headroom. Anything else
// (a holder missing, a stranger reporting a lease, no promise) keeps the
// headroom back until learning ends.
func TestHolderPromiseEndsLearning(t *testing.T) {
	start := int64(1e18)
	lead := newHolderHarness(t, 1, start, Prior{Kind: PriorNew})
	if got := lead.ask("a", 30, 0); got != 30 {
		t.Fatalf("a got %v", got)
	}
	if got := lead.ask("b", 20, 0); got != 20 {
		t.Fatalf("b got %v", got)
	}
	rec := lead.last
	e := rec.GetResources()["r"]
	if e.GetHolders() != 2 || e.GetHoldersUntil() == nil || e.GetHoldersDigest() != holderHash(lead.l.holderKey(), "a")+holderHash(lead.l.holderKey(), "b") {
		t.Fatalf("record entry %v does not promise holders a and b", e)
	}
	if ids := e.GetHolderIds(); len(ids) != 2 || ids[0] != "a" || ids[1] != "b" {
		t.Fatalf("record entry lists holders %v, want [a b]", ids)
	}
	if e.GetCeiling() <= 50 {
		t.Fatalf("ceiling %v has no headroom: the test would prove nothing", e.GetCeiling())
	}
	noIDs := proto.Clone(rec).(*allotpb.LeaseHorizon)
	noIDs.GetResources()["r"].HolderIds = nil
	// An older version's record: its digest is unkeyed, so anyone could
	// have matched it.
	noKey := proto.Clone(rec).(*allotpb.LeaseHorizon)
	noKey.HoldersKey = nil
	if len(rec.GetHoldersKey()) != HolderKeySize {
		t.Fatalf("record carries holders key %x", rec.GetHoldersKey())
	}
	noPromise := proto.Clone(rec).(*allotpb.LeaseHorizon)
	ne := noPromise.GetResources()["r"]
	ne.Holders, ne.HoldersDigest, ne.HoldersUntil = 0, 0, nil

	for _, tc := range []struct {
		name    string
		rec     *allotpb.LeaseHorizon
		reports []report // first contacts, in order, before the newcomer
		want    float64  // what newcomer c (wanting 50) gets
	}{
		{"all holders heard", rec, []report{{"a", 30}, {"b", 20}}, 50},
		{"a holder missing", rec, []report{{"a", 30}}, 100 - e.GetCeiling()},
		// The record lists the holders: the stranger's claim is refused
		// (it never held a lease) and cannot hold learning up.
		{"a stranger reports a lease", rec, []report{{"x", 0.001}, {"a", 30}, {"b", 20}}, 50 - 0.001},
		// Without the list only the digest tells: the sets differ, and
		// learning runs its course.
		{"a stranger reports a lease, no ids", noIDs, []report{{"x", 0.001}, {"a", 30}, {"b", 20}}, 100 - e.GetCeiling()},
		{"no promise", noPromise, []report{{"a", 30}, {"b", 20}}, 100 - e.GetCeiling()},
		{"no key", noKey, []report{{"a", 30}, {"b", 20}}, 100 - e.GetCeiling()},
		// The listed ids still bound who may claim a lease.
		{"a stranger reports a lease, no key", noKey, []report{{"x", 0.001}, {"a", 30}, {"b", 20}}, 100 - e.GetCeiling() - 0.001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			succ := newHolderHarness(t, 2, start+int64(time.Second), Prior{Kind: PriorRecord, Record: tc.rec})
			for _, rp := range tc.reports {
				if got := succ.ask(rp.id, rp.has, rp.has); got != rp.has {
					t.Fatalf("%s reported %v, got %v", rp.id, rp.has, got)
				}
			}
			if stranger := tc.rec.GetResources()["r"].GetHolderIds() != nil && tc.reports[0].id == "x"; stranger != (succ.l.Stats().OverClaims == 1) {
				t.Fatalf("over-claims %d", succ.l.Stats().OverClaims)
			}
			got := succ.ask("c", 50, 0)
			if diff := got - tc.want; diff > 1e-9 || diff < -1e-9 {
				t.Fatalf("newcomer got %v, want %v", got, tc.want)
			}
			// Whatever happened, the leases out stay within the capacity.
			var sum float64
			for _, id := range []string{"a", "b", "x", "c"} {
				if r := succ.l.resources["r"]; r != nil {
					if i, ok := r.lookup(id); ok {
						sum += r.clients.at(i).exposure(succ.now)
					}
				}
			}
			if sum > 100+1e-9 {
				t.Fatalf("%v leased out of 100", sum)
			}
		})
	}
}

// A new client waits for a record that lists it while a holder promise
// binds, and a failed write leaves grants bound by both the old promise
// and the one that may have been stored.
func TestHolderPromiseBindsNewClients(t *testing.T) {
	h := newHolderHarness(t, 1, int64(1e18), Prior{Kind: PriorNew})
	h.ask("a", 10, 0)
	r := h.l.resources["r"]
	if !r.promising(h.now) || r.mayHold("z", h.now) || !r.mayHold("a", h.now) {
		t.Fatal("no promise binds after a committed write")
	}
	// b's record write fails.
	h.enqueue("b", 10)
	p := h.l.Propose(h.now)
	if p == nil || p.Record.GetResources()["r"].GetHolders() != 2 {
		t.Fatalf("no record proposed listing b: %v", p)
	}
	h.l.Allocate(h.now)
	h.l.EndRound()
	h.l.Commit(h.now, p, errTest)
	if r.mayHold("b", h.now) {
		t.Fatal("b may hold after the write listing it failed")
	}
	if !r.mayHold("a", h.now) {
		t.Fatal("a, in both promises, may not hold")
	}
}

// testHolderKey is the holder digest key of the tests' leaders.
func testHolderKey() [HolderKeySize]byte { return termHolderKey(0) }

// termHolderKey is a holder digest key of its own for each term, as a
// coordinator draws one.
func termHolderKey(term uint64) [HolderKeySize]byte {
	var k [HolderKeySize]byte
	for i := range k {
		k[i] = byte(term*31 + uint64(i) + 1)
	}
	return k
}

type report struct {
	id  string
	has float64
}

var errTest = errTestType{}

type errTestType struct{}

func (errTestType) Error() string { return "test: write failed" }

// A successor does not keep its predecessor's holder promise, so its own
// records must not carry it: its takeover record lists the predecessor's
// ceiling without the promise.
func TestTakeoverRecordDropsPromise(t *testing.T) {
	start := int64(1e18)
	lead := newHolderHarness(t, 1, start, Prior{Kind: PriorNew})
	lead.ask("a", 30, 0)
	if lead.last.GetResources()["r"].GetHoldersUntil() == nil {
		t.Fatal("no promise recorded")
	}
	succ := newHolderHarness(t, 2, start+int64(time.Second), Prior{Kind: PriorRecord, Record: lead.last})
	e := succ.last.GetResources()["r"]
	if e == nil || e.GetCeiling() != lead.last.GetResources()["r"].GetCeiling() {
		t.Fatalf("takeover record entry %v does not carry the predecessor's ceiling", e)
	}
	if e.GetHoldersUntil() != nil || e.GetHolders() != 0 {
		t.Fatalf("takeover record entry %v carries the predecessor's promise", e)
	}
}

// While a write that starts a promise is in flight, only the clients it
// lists may be granted: the write may land.
func TestPromiseInFlightBinds(t *testing.T) {
	h := newHolderHarness(t, 1, int64(1e18), Prior{Kind: PriorNew})
	l, now := h.l, h.now
	h.enqueue("a", 10)
	p := l.Propose(now) // lists a; stays in flight
	if p == nil {
		t.Fatal("nothing proposed")
	}
	l.Allocate(now)
	l.EndRound()
	r := l.resources["r"]
	if r.mayHold("b", now) {
		t.Fatal("b may be granted while a write promising only a is in flight")
	}
	if !r.mayHold("a", now) {
		t.Fatal("a is listed by the write in flight but may not be granted")
	}
}

// However many resources and holders, the record a ledger proposes stays
// within MaxRecordBytes as protojson (the store refuses larger ones, and a
// leader that cannot write holds its grants): entry estimates cover the
// holder promise, and holder ids go in only while there is room.
func TestRecordWithPromisesStaysWithinLimit(t *testing.T) {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 1e12 / 3, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 10 * time.Second}
	set := config.NewSet(1, []*config.Template{tm}, nil)
	const limit = 64 << 10
	now := int64(1e18) + 123456789
	l := New(Config{HolderKey: testHolderKey(), Node: "n", ServerID: "s", Term: 1, MaxRecordBytes: limit})
	p, _ := l.Start(now, Prior{Kind: PriorNew})
	l.Commit(now, p, nil)
	pad := strings.Repeat("\\u00e9", 40)
	var last *allotpb.LeaseHorizon
	for k := range 400 {
		req := &allotpb.GetCapacityRequest{ClientId: fmt.Sprintf("%s-client-%d", pad, k)}
		req.Resource = append(req.Resource, &allotpb.ResourceRequest{ResourceId: fmt.Sprintf("%s/%d", strings.Repeat("r", 200), k), Wants: 1e12 / 7})
		if _, err := l.Get(now, set, req); err != nil {
			break // no room for more resources: refused, as it should be
		}
		if p := l.Propose(now); p != nil {
			l.Commit(now, p, nil)
			last = p.Record
		}
		l.Allocate(now)
		l.EndRound()
	}
	if last == nil {
		t.Fatal("no record proposed")
	}
	data, err := protojson.Marshal(last)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > limit {
		t.Fatalf("record of %d bytes, limit %d (%d resources listed)", len(data), limit, len(last.GetResources()))
	}
	t.Logf("record of %d bytes with %d resources listed", len(data), len(last.GetResources()))
}

// A resource whose client records are mostly of clients that hold
// nothing records its promise without the holders' ids: listing them
// would walk every record on each write, a cost that grows with the
// records and not with what changed. The count and digest still stand.
func TestHolderIDsSkipManyIdleRecords(t *testing.T) {
	for _, tc := range []struct {
		name    string
		idle    int
		wantIDs bool
	}{
		{"few idle records", 10, true},
		{"many idle records", 5000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lead := newHolderHarness(t, 1, int64(1e18), Prior{Kind: PriorNew})
			for i := range tc.idle {
				lead.enqueue(fmt.Sprintf("idle-%d", i), 0)
			}
			if got := lead.ask("a", 30, 0); got != 30 {
				t.Fatalf("a got %v", got)
			}
			if got := lead.ask("b", 20, 0); got != 20 {
				t.Fatalf("b got %v", got)
			}
			e := lead.last.GetResources()["r"]
			if e.GetHolders() != 2 || e.GetHoldersDigest() != holderHash(lead.l.holderKey(), "a")+holderHash(lead.l.holderKey(), "b") {
				t.Fatalf("record entry %v does not promise holders a and b", e)
			}
			if got := len(e.GetHolderIds()) == 2; got != tc.wantIDs {
				t.Fatalf("holder ids %v listed with %d idle records: want listed %v", e.GetHolderIds(), tc.idle, tc.wantIDs)
			}
		})
	}
}
