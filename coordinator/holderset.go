package coordinator

import (
	"hash/maphash"
	"math/bits"
)

// holderSet is the holders' table: an open-addressing hash table (linear
// probing) of 16-byte slots, each a key's 64-bit fingerprint and the end
// of its latest lease. A map[string]*int64 took about 60 bytes a holder
// (its own copy of the key, the int64 on the heap and the map's slot),
// a fifth of a coordinator's memory per lease at a million; this takes
// 16 bytes a slot and at least 4/3 slots a holder. It grows by half
// (not doubling) when three quarters full, so that it holds between 1/2
// and 3/4 of its slots.
//
// A fingerprint stands for its key: maphash, seeded at random per table,
// so that two keys share one with probability 2^-64 and nobody outside
// can choose keys that do. A key that did would be taken for the
// holder's (classed as a holder, and its lease end merged into the
// holder's): a request's place in the intake's order, never what it is
// granted.
type holderSet struct {
	seed  maphash.Seed
	slots []holderSlot
	n     int
}

// holderSlot is one slot; fp 0 marks it empty (fingerprint never
// returns 0).
type holderSlot struct {
	fp    uint64
	until int64
}

func newHolderSet() holderSet { return holderSet{seed: maphash.MakeSeed()} }

// fingerprint returns the fingerprint of key.
func (s *holderSet) fingerprint(key []byte) uint64 { return max(maphash.Bytes(s.seed, key), 1) }

// home returns the slot where a probe for fp starts among size slots.
func home(fp uint64, size int) int {
	hi, _ := bits.Mul64(fp, uint64(size))
	return int(hi)
}

// find returns the slot holding fp, or -1.
func (s *holderSet) find(fp uint64) int {
	size := len(s.slots)
	if s.n == 0 {
		return -1
	}
	for i := home(fp, size); ; {
		switch s.slots[i].fp {
		case fp:
			return i
		case 0:
			return -1
		}
		if i++; i == size {
			i = 0
		}
	}
}

// insert adds fp, which is not in s, ending at until.
func (s *holderSet) insert(fp uint64, until int64) {
	if (s.n+1)*4 > len(s.slots)*3 {
		old := s.slots
		s.slots = make([]holderSlot, max(8, len(old)*3/2))
		for _, sl := range old {
			if sl.fp != 0 {
				s.place(sl)
			}
		}
	}
	s.place(holderSlot{fp: fp, until: until})
	s.n++
}

// place puts sl in the first free slot from its home.
func (s *holderSet) place(sl holderSlot) {
	size := len(s.slots)
	i := home(sl.fp, size)
	for s.slots[i].fp != 0 {
		if i++; i == size {
			i = 0
		}
	}
	s.slots[i] = sl
}

// removeIf removes the entries whose until drop says to, in one pass
// and without allocating.
func (s *holderSet) removeIf(drop func(until int64) bool) {
	for i := 0; i < len(s.slots); {
		if sl := s.slots[i]; sl.fp != 0 && drop(sl.until) {
			// The slot now holds a later entry, or nothing: look again.
			s.remove(i)
			continue
		}
		i++
	}
}

// remove empties slot i and moves back the entries after it that a probe
// could no longer reach past the gap (backward-shift deletion, which
// needs no tombstones). Entries move only into gaps later in the probe
// run, so removeIf's single pass still sees every entry: a gap it has
// passed gets an entry only where the run wraps around the end, and then
// one from a slot it has passed too.
func (s *holderSet) remove(i int) {
	size := len(s.slots)
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		if s.slots[j].fp == 0 {
			break
		}
		// The entry at j stays if its home lies cyclically in (i, j]:
		// a probe from there reaches j without crossing the gap at i.
		k := home(s.slots[j].fp, size)
		if i <= j && i < k && k <= j || i > j && (k > i || k <= j) {
			continue
		}
		s.slots[i] = s.slots[j]
		i = j
	}
	s.slots[i] = holderSlot{}
	s.n--
}
