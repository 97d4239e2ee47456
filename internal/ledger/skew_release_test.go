package ledger

import (
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// write has the leader write its record now (a sweep's write).
func (w *writeRounds) write() {
	w.t.Helper()
	w.l.Rewrite()
	p := w.l.Sweep(w.now)
	if p == nil {
		w.t.Fatal("no write")
	}
	w.l.Commit(w.now, p, nil)
	w.stored = p.Record
}

// leaseInForce is what an agent holding ls may use at now (its clock right):
// its lease while it lasts, then its floor until that ends.
func leaseInForce(ls Lease, now int64) float64 {
	switch {
	case ls.Expiry > now:
		return ls.Capacity
	case ls.SafeExpiry > now:
		return ls.SafeCapacity
	}
	return 0
}

// A promised holder whose floor ends within the clock skew after the
// takeover (its lease ended before it) comes back at once, reporting the
// floor it still runs on. The successor hears every promised holder and
// releases its predecessor's floors down to unlisted_floors (0: nobody
// outside the promise), but it did not credit that floor (it took a floor
// ending by learnStart + skew for one that ended before the takeover): the
// floor is counted nowhere while the holder, whose reply is lost, runs on
// it; a newcomer is granted the whole capacity beside it.
func TestReleaseCountsFloorsEndingWithinSkew(t *testing.T) {
	const skew = time.Second
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: time.Minute,
		Floor: config.FloorPolicy{Share: 0.5, Lease: 12 * time.Second}}
	t0 := int64(1e18)
	w := &writeRounds{t: t, set: config.NewSet(1, []*config.Template{tm}, nil), now: t0, skew: skew, floors: true}
	w.start(1)
	x := w.ask("x", 100, Lease{}, false)
	if x.Capacity != 100 || x.SafeCapacity != 50 {
		t.Fatalf("x got %+v", x)
	}
	// A write while x's lease runs: the promise lists x (until 10 s later).
	w.now = t0 + int64(8*time.Second)
	w.write()
	rec := w.stored.GetResources()["r"]
	if rec.GetHoldersUntil() == nil || rec.GetHolders() != 1 || rec.GetUnlistedFloors() != 0 {
		t.Fatalf("record %v: want a promise of x alone, nothing unlisted", rec)
	}

	// The leader dies; a successor takes over between the end of x's lease
	// and the end of its floor, within the skew of the floor's end.
	w.now = x.SafeExpiry - int64(skew/2)
	if w.now <= x.Expiry {
		t.Fatalf("the scenario needs x's lease over at the takeover")
	}
	w.start(2)
	// x comes back, reporting its (expired) lease and its floor; it wants
	// nothing now, and the reply that says so is lost: it runs on its floor
	// until that ends.
	w.now += int64(10 * time.Millisecond)
	w.ask("x", 0, x, false)
	r := w.l.resources["r"]
	y := w.ask("y", 100, Lease{}, false)
	y = w.ask("y", 100, y, false)
	held := leaseInForce(x, w.now) + leaseInForce(y, w.now)
	t.Logf("x on its floor %v until %+dms; y %v; successor keeps back %v of its predecessor's floors, learning %v",
		leaseInForce(x, w.now), (x.SafeExpiry-w.now)/1e6, leaseInForce(y, w.now), r.predFloorOutstanding(w.now), r.learning(w.now))
	if held > tm.Capacity+1e-9 {
		t.Fatalf("in force %v of capacity %v", held, tm.Capacity)
	}
}

// The lease analogue: a promised holder whose lease ends within the clock
// skew after the takeover comes back at once and reports it; the
// successor counts it heard (ending learning) but does not credit a lease
// ending by learnStart + skew.
func TestEarlyEndCountsLeasesEndingWithinSkew(t *testing.T) {
	const skew = time.Second
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: time.Minute}
	t0 := int64(1e18)
	w := &writeRounds{t: t, set: config.NewSet(1, []*config.Template{tm}, nil), now: t0, skew: skew, floors: true}
	w.start(1)
	x := w.ask("x", 100, Lease{}, false)
	if x.Capacity != 100 {
		t.Fatalf("x got %+v", x)
	}
	w.now = t0 + int64(3*time.Second)
	w.write()
	if rec := w.stored.GetResources()["r"]; rec.GetHoldersUntil() == nil || rec.GetHolders() != 1 {
		t.Fatalf("record %v: want a promise of x alone", rec)
	}
	// A takeover half the skew before x's lease ends.
	w.now = x.Expiry - int64(skew/2)
	w.start(2)
	w.now += int64(10 * time.Millisecond)
	w.ask("x", 0, x, false) // the reply is lost: x uses its lease until it ends
	r := w.l.resources["r"]
	y := w.ask("y", 100, Lease{}, false)
	y = w.ask("y", 100, y, false)
	held := leaseInForce(x, w.now) + leaseInForce(y, w.now)
	t.Logf("x %v until %+dms; y %v; learning %v", leaseInForce(x, w.now), (x.Expiry-w.now)/1e6, leaseInForce(y, w.now), r.learning(w.now))
	if held > tm.Capacity+1e-9 {
		t.Fatalf("in force %v of capacity %v", held, tm.Capacity)
	}
}

// A client whose clock lags asks again just after its lease ended on the
// coordinator's clock, reporting the lease it still uses (until its own
// clock reaches the end, up to the skew later) and wanting nothing; the
// reply is lost. The report must not confirm that the lease is gone
// before the skew has passed.
func TestReportedLeaseCountsWithinSkewOfItsEnd(t *testing.T) {
	const skew = time.Second
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: time.Minute}
	w := &writeRounds{t: t, set: config.NewSet(1, []*config.Template{tm}, nil), now: int64(1e18), skew: skew, floors: true}
	w.start(1)
	x := w.ask("x", 100, Lease{}, false)
	if x.Capacity != 100 {
		t.Fatalf("x got %+v", x)
	}
	const lag = skew / 2 // x's clock is this far behind
	w.now = x.Expiry + int64(lag/2)
	w.ask("x", 0, x, false) // lost: x uses its lease until its clock reads its end
	y := w.ask("y", 100, Lease{}, false)
	y = w.ask("y", 100, y, false)
	held := leaseInForce(x, w.now-int64(lag)) + leaseInForce(y, w.now)
	if held > tm.Capacity+1e-9 {
		t.Fatalf("in force %v of capacity %v (x %v, y %v)", held, tm.Capacity, leaseInForce(x, w.now-int64(lag)), leaseInForce(y, w.now))
	}
}

// Once the recorded horizon has passed (writes fail), a grant ends as it
// is made. Told as a lease it would outlive the record's latest expiry on
// the clock of a client that lags, while a successor trusts that expiry
// (plus the skew) to bound every lease: it is told as none.
func TestNoLeaseToldPastTheRecordedExpiry(t *testing.T) {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: time.Minute}
	w := &writeRounds{t: t, set: config.NewSet(1, []*config.Template{tm}, nil), now: int64(1e18), skew: time.Second}
	w.start(1)
	x := w.ask("x", 50, Lease{}, false)
	for range 100 {
		w.now += int64(time.Second)
		x = w.ask("x", 50, x, true) // every write fails
		recorded := w.stored.GetResources()["r"].GetLatestExpiry().AsTime().UnixNano()
		if x.Capacity > 0 && x.Expiry > recorded {
			t.Fatalf("told %v until %+dms, after the recorded latest expiry (%+dms)", x.Capacity, (x.Expiry-w.now)/1e6, (recorded-w.now)/1e6)
		}
	}
}
