package ledger

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// A client that releases and asks again in the same round (the two
// requests travel on different subscriptions, so their order at the
// coordinator is not the client's) keeps its record: the lease the round
// grants it still counts against capacity.
func TestReleaseThenGetSameRound(t *testing.T) {
	tm := &config.Template{Name: "t", Glob: "r", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second}
	r := newResource("r", tm, 1)
	r.ceiling, r.ceilingExpiry, r.published = 100, 1<<62, true
	now := int64(1e18)
	round := func() {
		r.allocate(&roundParams{now: now, horizon: now + int64(time.Hour), minFresh: 50 * time.Millisecond})
		r.dropReleased()
		now += int64(100 * time.Millisecond)
		r.expire(now)
	}
	r.upsert("a", 100, 1, 0, holding{}, now)
	round()
	r.markReleased("a", now)
	ia := r.upsert("a", 100, 1, 0, holding{}, now)
	round()
	granted := r.clients.at(ia).has
	ib := r.upsert("b", 100, 1, 0, holding{}, now)
	round()
	if got := granted + r.clients.at(ib).has; got > tm.Capacity {
		t.Fatalf("a holds %v and b got %v: %v leased of capacity %v", granted, r.clients.at(ib).has, got, tm.Capacity)
	}
}

// A template whose lease length was shortened before a failover must not
// end learning before the predecessor's longer leases expire.
func TestLearningOutlastsPredecessorLeases(t *testing.T) {
	started := time.Unix(1_000_000, 0)
	predExpiry := started.Add(55 * time.Second)
	c := startedLedger(t, started, started.Add(120*time.Second), map[string]*allotpb.ResourceSummary{"r": {Ceiling: 100, LatestExpiry: timestamppb.New(predExpiry)}})
	tm := &config.Template{Name: "t", Glob: "r", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: 5 * time.Second, LearningModeDuration: 10 * time.Second}
	r := c.newResource(started.UnixNano(), "r", tm, 1)
	if want := predExpiry.Add(2 * time.Second).UnixNano(); r.learningUntil < want {
		t.Fatalf("learning ends %v after start, before the predecessor's leases (+skew) at %v",
			time.Duration(r.learningUntil-started.UnixNano()), time.Duration(want-started.UnixNano()))
	}
	now := started.Add(11 * time.Second).UnixNano()
	r.ceiling, r.ceilingExpiry = 100, now+int64(time.Hour)
	i := r.upsert("newcomer", 100, 1, 0, holding{}, now)
	r.allocate(&roundParams{now: now, horizon: now + int64(time.Hour), minFresh: 50 * time.Millisecond})
	if got := r.clients.at(i).has; got > 0 {
		t.Fatalf("a newcomer got %v while the predecessor's 100 of 100 may still be held", got)
	}
}

// A resource created as STATIC during learning and switched to FAIR_SHARE
// still counts the predecessor's leases.
func TestLearningAcrossAlgorithmChange(t *testing.T) {
	started := time.Unix(1_000_000, 0)
	predExpiry := started.Add(30 * time.Second)
	c := startedLedger(t, started, started.Add(60*time.Second), map[string]*allotpb.ResourceSummary{"r": {Ceiling: 80, LatestExpiry: timestamppb.New(predExpiry)}})
	static := &config.Template{Name: "t", Glob: "r", Capacity: 100, Algorithm: allotpb.Algorithm_STATIC,
		LeaseLength: 60 * time.Second, RefreshInterval: 5 * time.Second, LearningModeDuration: 60 * time.Second}
	r := c.newResource(started.UnixNano(), "r", static, 1)
	fair := *static
	fair.Algorithm = allotpb.Algorithm_FAIR_SHARE
	r.tmpl = &fair
	now := started.Add(time.Second).UnixNano()
	i := r.upsert("newcomer", 100, 1, 0, holding{}, now)
	r.allocate(&roundParams{now: now, horizon: now + int64(time.Hour), minFresh: 50 * time.Millisecond})
	if got := r.clients.at(i).has; got > 20 {
		t.Fatalf("newcomer got %v; the predecessor may hold 80 of 100", got)
	}
}

// startedLedger returns a ledger that took over at started from a
// predecessor whose record has the given horizon and summaries.
func startedLedger(t *testing.T, started, horizon time.Time, res map[string]*allotpb.ResourceSummary) *Ledger {
	t.Helper()
	l := New(Config{HolderKey: testHolderKey(), Node: "n", ServerID: "s", Term: 2, ClockSkew: 2 * time.Second})
	p, err := l.Start(started.UnixNano(), Prior{Kind: PriorRecord, Record: &allotpb.LeaseHorizon{
		Term: 1, Horizon: timestamppb.New(horizon.Add(-2 * time.Second)), Resources: res}})
	if err != nil {
		t.Fatal(err)
	}
	l.Commit(started.UnixNano(), p, nil)
	return l
}
