package coordinator

import "testing"

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
