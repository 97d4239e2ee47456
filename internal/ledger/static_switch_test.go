package ledger

import (
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// A template change from a share algorithm to STATIC lifts the recorded
// ceiling (needs); until a record that says so is stored, the stored
// record's ceiling and holder promise still bind. A client granted under
// STATIC after that write failed holds a lease the stored record neither
// bounds nor lists, so a successor that hears the promised holders ends
// learning while it is outstanding (and one that learns the normal way
// holds back only the recorded ceiling).
//
// This fails on main and predates the incremental holder promises: the
// non-share path of allocate grants targets whatever is recorded.
func TestStaticSwitchGrantsOutsideStoredPromise(t *testing.T) {
	share := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 10 * time.Second}
	static := *share
	static.Algorithm = allotpb.Algorithm_STATIC
	w := &writeRounds{t: t, set: config.NewSet(1, []*config.Template{share}, nil), now: int64(1e18)}
	w.start(1)
	if got := w.ask("a", 50, Lease{}, false); got.Capacity != 50 {
		t.Fatalf("a granted %v", got.Capacity)
	}
	e := w.stored.GetResources()["r"]
	if e.GetHolders() != 1 || e.GetHoldersUntil() == nil {
		t.Fatalf("stored entry %v: want a promise of a alone", e)
	}
	// The switch to STATIC: the write that would lift the ceiling fails.
	w.set = config.NewSet(2, []*config.Template{&static}, nil)
	b := w.ask("b", 50, Lease{}, true)
	if until := e.GetHoldersUntil().AsTime().UnixNano(); b.Capacity > 0 && until > w.now {
		t.Errorf("b granted %v under STATIC while the stored record promises only a (%d holders) until %+dms and bounds the resource at %v",
			b.Capacity, e.GetHolders(), (until-w.now)/1e6, e.GetCeiling())
	}
}
