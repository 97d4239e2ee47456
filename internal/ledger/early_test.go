package ledger

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// A holder that refreshes steadily never waits for a record write, even
// when every write queues behind a newcomer's that is slow to finish (a
// flood): the recorded expiries of its resource, lease and floor, are
// raised early, by a write before its grants need them. Before, its
// refresh waited for a write each time its lease outran the recorded
// expiry, and under a flood that write came after the newcomers'.
func TestSteadyHolderNeverWaitsForARecord(t *testing.T) {
	set := fairTemplate(100) // leases of 5s, floors of 20s
	now := int64(1e18)
	l := newDeployment(now)
	now += int64(10 * time.Second) // past learning
	waited, refreshes := 0, 0
	// A minute; a newcomer each second, whose write takes 1.5s; the
	// holder refreshes every half second.
	sim := holderSim{steps: 600, write: 1500 * time.Millisecond, newcomerAt: 0, holderEvery: 5}
	sim.run(t, l, set, now, func(i int, _ int64, asked bool, holder []Slot) {
		if asked && i >= 50 { // once its first grant is recorded
			refreshes++
			if !Ready(holder) {
				waited++
			}
		}
	})
	if waited > 0 {
		t.Errorf("the holder waited for a record write in %d of its %d refreshes", waited, refreshes)
	}
}

// A store that is slow, not failing, does not cut a steady holder's
// leases: with every write taking half a lease length (2.5 s, above the
// writer's time-out of 2 s) and queued behind another (a newcomer's each
// second), the recorded expiry of the holder's resource is raised before
// its leases reach it. Before, it was raised when less than 1.5 lease
// lengths were left, to 2 ahead: a write that landed more than half a
// lease length, less the refresh interval, after the round that asked
// for it let the holder's leases be cut short, then zero-length.
func TestSlowWritesDoNotCutSteadyLeases(t *testing.T) {
	slowWritesCut(t, fairTemplate(100)) // leases of 5s, refreshed every 1s; floors of 20s
}

// So with no floors, whose leases of 20 s kept the horizon far ahead:
// the horizon is as near as the holder's latest expiry. Its raise,
// asked for by rounds that each found a write out, was dropped until a
// round found none, while the resource's was kept for the next record:
// with writes back to back, the horizon cut the holder's leases, then
// the resource's latest expiry, raised only as far as the horizon.
func TestSlowWritesDoNotCutSteadyLeasesWithoutFloors(t *testing.T) {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 5 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 5 * time.Second,
		Floor: config.FloorPolicy{Unlimited: true}}
	slowWritesCut(t, config.NewSet(1, []*config.Template{tm}, nil))
}

// slowWritesCut runs a holder of set's resource "good" refreshing every
// second, a newcomer of "x" each second, and writes of 2.5 s, and fails
// if any of the holder's leases is cut short.
func slowWritesCut(t *testing.T, set *config.Set) {
	t.Helper()
	const lease = int64(5 * time.Second)
	now := int64(1e18)
	l := newDeployment(now)
	// Each write takes half a lease length, so the holder's raise, queued
	// behind another write, lands within a lease length of the round that
	// asked for it. A minute and a half; the holder refreshes every second,
	// a newcomer of another resource half a second later: each wants a
	// write, which the holder's raise may queue behind.
	sim := holderSim{steps: 900, write: 2500 * time.Millisecond, newcomerAt: 5, holderEvery: 10, proposeOnLand: true}
	unanswered := false
	refreshes, cut := 0, 0
	sim.run(t, l, set, now, func(i int, now int64, asked bool, holder []Slot) {
		if asked {
			unanswered = true
		}
		if unanswered && Ready(holder) {
			// Answered now, or after waiting for a write.
			unanswered = false
			if i >= 50 { // once its first grant is recorded
				refreshes++
				if ls := holder[0].Lease(now); ls.Expiry < now+lease {
					cut++
					t.Logf("%.1fs: lease cut to %v", float64(i)/10, time.Duration(ls.Expiry-now))
				}
			}
		}
	})
	if cut > 0 {
		t.Fatalf("%d of the holder's %d leases cut short by writes of %v", cut, refreshes, sim.write)
	}
}

// holderSim drives a ledger as the coordinator drives it over a store
// whose writes take write each, in steps of 100 ms: a write that has
// landed is committed (and, with proposeOnLand, the next record proposed
// at once, as the coordinator does), a newcomer of resource "x" asks at
// step newcomerAt of every ten, the holder "h" of "good" refreshes every
// holderEvery steps, a record is proposed unless one is out, the round is
// allocated, and observe sees the step before the round ends.
type holderSim struct {
	steps                   int
	write                   time.Duration
	newcomerAt, holderEvery int
	proposeOnLand           bool
}

func (s holderSim) run(t *testing.T, l *Ledger, set *config.Set, now int64, observe func(i int, now int64, asked bool, holder []Slot)) {
	t.Helper()
	const step = 100 * time.Millisecond
	var inflight *Proposal
	var doneAt int64
	var holder []Slot
	for i := range s.steps {
		now += int64(step)
		if inflight != nil && now >= doneAt {
			l.Commit(now, inflight, nil)
			inflight = nil
			if s.proposeOnLand {
				if p := l.Propose(now); p != nil {
					inflight, doneAt = p, now+int64(s.write)
				}
			}
		}
		if i%10 == s.newcomerAt {
			if _, err := l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: fmt.Sprint("n-", i),
				Resource: []*allotpb.ResourceRequest{{ResourceId: "x", Wants: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		asked := i%s.holderEvery == 0
		if asked {
			var err error
			if holder, err = l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: "h",
				Resource: []*allotpb.ResourceRequest{{ResourceId: "good", Wants: 10}}}); err != nil {
				t.Fatal(err)
			}
		}
		if p := l.Propose(now); p != nil {
			inflight, doneAt = p, now+int64(s.write)
		}
		l.Allocate(now)
		observe(i, now, asked, holder)
		l.EndRound()
	}
}

// Leases cut short to the record are counted, and TakeCut says where and
// by how much: the coordinator logs it, since a store that does not keep
// up otherwise shortens leases silently. Here writes stop landing after
// the first: the holder's leases shorten as the recorded expiry nears,
// then are zero-length.
func TestCutLeasesAreCounted(t *testing.T) {
	set := fairTemplate(100) // leases of 5s, refreshed every 1s
	now := int64(1e18)
	l := newDeployment(now)
	var holder []Slot
	for i := range 300 { // 30 s, a round every 100 ms
		now += int64(100 * time.Millisecond)
		if i%10 == 0 {
			var err error
			if holder, err = l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: "h",
				Resource: []*allotpb.ResourceRequest{{ResourceId: "good", Wants: 10}}}); err != nil {
				t.Fatal(err)
			}
		}
		if p := l.Propose(now); p != nil {
			if l.Stats().RecordWrites == 1 { // the takeover's so far
				l.Commit(now, p, nil) // lists the resource
			} else {
				l.Commit(now, p, errors.New("time-out"))
			}
		}
		l.Allocate(now)
		l.EndRound()
	}
	if !Ready(holder) || holder[0].Lease(now).Capacity != 0 {
		t.Fatalf("the holder's last lease: %+v", holder[0].Lease(now))
	}
	n := l.Stats().CutLeases
	c := l.TakeCut()
	if n == 0 || c.Leases != n || c.Resource != "good" || c.By != 5*time.Second {
		t.Fatalf("cut %+v, counted %d; want the holder's leases, cut to zero length", c, n)
	}
	if c := l.TakeCut(); c.Leases != 0 || l.Stats().CutLeases != n {
		t.Fatalf("after TakeCut: cut %+v, counted %d of %d", c, l.Stats().CutLeases, n)
	}
}

// newDeployment is the root ledger of a new deployment, its first record
// committed at now.
func newDeployment(now int64) *Ledger {
	l := New(Config{Node: "root", ServerID: "root", Term: 1})
	p, _ := l.Start(now, Prior{Kind: PriorNew})
	l.Commit(now, p, nil)
	return l
}
