package wire

import (
	"strconv"
	"sync"
	"testing"
	"unsafe"
)

// An IDCache returns a string equal to the bytes it is given, whatever
// it held before and whoever else uses it at the same time, and the one
// it keeps for bytes seen before.
func TestIDCache(t *testing.T) {
	c := NewIDCache()
	long := make([]byte, maxCachedID+1)
	for i := range long {
		long[i] = 'x'
	}
	if got := c.Name(long); got != string(long) {
		t.Fatalf("a long id: %q", got)
	}
	first := c.Name([]byte("mysql/main"))
	if again := c.Name([]byte("mysql/main")); again != first || unsafe.StringData(again) != unsafe.StringData(first) {
		t.Fatalf("again: %q, want %q", again, first)
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.Name([]byte("mysql/main")) }); n != 0 {
		t.Errorf("an id seen before: %.0f allocations, want 0", n)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				id := []byte("r" + strconv.Itoa((i*7+g)%(3*idSlots)))
				if got := c.Name(id); got != string(id) {
					t.Errorf("goroutine %d: %q for %q", g, got, id)
					return
				}
			}
		})
	}
	wg.Wait()
}
