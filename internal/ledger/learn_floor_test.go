package ledger

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// writeRounds drives a ledger round by round for one request at a time,
// storing each proposal or failing it, and keeps the record stored last.
type writeRounds struct {
	t      *testing.T
	l      *Ledger
	set    *config.Set
	now    int64
	stored *allotpb.LeaseHorizon
	// floors: clients report the floor they hold too (safe), as agents do.
	floors bool
	// skew is the ledgers' clock skew (0: the default).
	skew time.Duration
}

// start makes a ledger of term take over from the stored record (or
// start anew, if none) and stores its takeover record.
func (w *writeRounds) start(term uint64) {
	w.t.Helper()
	w.l = New(Config{HolderKey: termHolderKey(term), Node: "n", ServerID: "s", Term: term, ClockSkew: w.skew})
	prior := Prior{Kind: PriorNew}
	if w.stored != nil {
		prior = Prior{Kind: PriorRecord, Record: w.stored}
	}
	p, err := w.l.Start(w.now, prior)
	if err != nil {
		w.t.Fatal(err)
	}
	w.l.Commit(w.now, p, nil)
	w.stored = p.Record
}

// ask has client id ask for wants of resource r, reporting has, and
// returns its answer; the writes its rounds propose fail if fail.
func (w *writeRounds) ask(id string, wants float64, has Lease, fail bool) Lease {
	w.t.Helper()
	rr := &allotpb.ResourceRequest{ResourceId: "r", Wants: wants}
	if has.Capacity > 0 {
		rr.Has = &allotpb.Lease{Capacity: has.Capacity, ExpiryTime: timestamppb.New(time.Unix(0, has.Expiry))}
	}
	if w.floors && has.SafeCapacity > 0 {
		rr.Safe = &allotpb.Lease{Capacity: has.SafeCapacity, ExpiryTime: timestamppb.New(time.Unix(0, has.SafeExpiry))}
	}
	slots, err := w.l.Get(w.now, w.set, &allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{rr}})
	if err != nil {
		w.t.Fatal(err)
	}
	for range 5 {
		if p := w.l.Propose(w.now); p != nil {
			if fail {
				w.l.Commit(w.now, p, errTest)
			} else {
				w.l.Commit(w.now, p, nil)
				w.stored = p.Record
			}
		}
		w.l.Allocate(w.now)
		w.l.EndRound()
		if Ready(slots) {
			return slots[0].Lease(w.now)
		}
		w.now += int64(10 * time.Millisecond)
	}
	w.t.Fatalf("%s not answered", id)
	return Lease{}
}

// In learning, a client is given the floor it may be running on back as
// a lease. A successor that credited all of its predecessor's ceiling
// (a client reported it) promises holders while still learning; a client
// that promise leaves out (its lease ended, its floor went on) must not
// be given its floor as a lease while the promise runs, even when the
// write that would list it fails: a successor of that record would end
// learning without hearing it.
func TestLearningFloorNotLeasedOutsidePromise(t *testing.T) {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 60 * time.Second,
		Floor: config.FloorPolicy{Share: 0.5, Lease: 20 * time.Second}}
	w := &writeRounds{t: t, set: config.NewSet(1, []*config.Template{tm}, nil), now: int64(1e18)}
	w.start(1)
	a := w.ask("a", 100, Lease{}, false)
	w.ask("c", 10, Lease{}, false) // promised as a wanter, never back
	// A takeover: a reports all of the predecessor's ceiling and c never
	// comes back, so learning goes on with nothing unaccounted for.
	w.start(2)
	a = w.ask("a", 40, a, false)
	a = w.ask("a", 40, a, false)
	b := w.ask("b", 50, Lease{}, false)
	if b.Capacity == 0 || b.SafeCapacity <= 0 {
		t.Fatalf("b granted %+v", b)
	}
	// b's lease ends; its floor goes on. A write promises a alone.
	w.now = b.Expiry + int64(3*time.Second)
	w.ask("a", 40, a, false)
	if !w.l.resources["r"].learning(w.now) {
		t.Fatal("learning is over: the scenario needs it to go on")
	}
	e := w.stored.GetResources()["r"]
	if e.GetHoldersUntil() == nil || e.GetHolders() != 1 {
		t.Fatalf("stored entry %v: want a promise of a alone", e)
	}
	// b comes back; the write that would list it fails.
	b = w.ask("b", 50, Lease{}, true)
	if until := e.GetHoldersUntil().AsTime().UnixNano(); b.Capacity > 0 && until > w.now {
		t.Errorf("b leased %v in learning while the stored record promises only a until %+dms", b.Capacity, (until-w.now)/1e6)
	}
}
