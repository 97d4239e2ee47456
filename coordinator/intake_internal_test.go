package coordinator

import (
	"strconv"
	"sync"
	"testing"

	"github.com/allot/allot/internal/leader"
)

// A refresh of a client already known moves its time without allocating
// (the time once escaped to the heap on every call), on the plain and the
// tenant subjects alike, and keeps the latest end.
func TestHoldOfAKnownClientAllocatesNothing(t *testing.T) {
	h := newHolders(10)
	for _, subject := range []string{"allot.root.capacity.refresh", "allot.t.acme.root.capacity.refresh"} {
		h.hold(subject, "c1", 100)
		until := int64(100)
		if allocs := testing.AllocsPerRun(100, func() {
			until++
			h.hold(subject, "c1", until)
		}); allocs != 0 {
			t.Errorf("%s: %.0f allocations per hold of a known client, want 0", subject, allocs)
		}
		h.hold(subject, "c1", 50)
		if got, ok := holdsUntil(h, subject, "c1"); !ok || got != until {
			t.Errorf("%s: holds until %d (%v), want %d", subject, got, ok, until)
		}
	}
}

// The round loop moves lease ends without a lock (moveUntil) while the
// intake classifies on other goroutines under the read lock: with
// -race, this shows the two never touch the same memory unguarded, as
// new holders are inserted (growing the table) and swept meanwhile.
func TestHoldBesideClassify(t *testing.T) {
	h := newHolders(1 << 10)
	const subject = "allot.root.capacity.get"
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = "c" + strconv.Itoa(i)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				h.classify(subject, ids[i%len(ids)])
			}
		}()
	}
	for round := range int64(20) {
		for i, id := range ids[:min(len(ids), 15*int(round+1))] {
			h.hold(subject, id, round*1000+int64(i))
		}
		h.sweep(round*1000 + int64(holderGrace))
	}
	close(done)
	wg.Wait()
	if h.classify(subject, ids[len(ids)-1]) != leader.ClassKnown {
		t.Error("the last client held is not known")
	}
}
