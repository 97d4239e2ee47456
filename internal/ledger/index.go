package ledger

import "hash/maphash"

// idIndex finds a resource's client record by its id: open-addressing
// hash tables (linear probing) of client indices, 4 bytes a slot and
// fewer than two slots a record, where a map[string]int32 took about
// forty bytes a record (its own copy of the id's string header among
// them). The ids themselves are the records'.
//
// A table doubles when three quarters full, rehashing what it holds: past
// splitAt records the index splits into tables tables, chosen by the
// hash's top bits, that double one at a time, so that no request waits
// for a million ids to be rehashed (some 400 ms), only for a
// sixty-fourth of them.
type idIndex struct {
	seed maphash.Seed
	tabs []idTable // one, or tables
	n    int
}

type idTable struct {
	slots []int32 // client index + 1; 0 is empty
	n     int
}

const (
	// maxLoad is the most records per slot, in quarters.
	maxLoad = 3
	// tables is how many tables a large index has; splitAt the records
	// at which it gets them.
	tablesShift = 6
	tables      = 1 << tablesShift
	splitAt     = 1 << 16
)

// at returns the table id belongs in and the slot it probes from.
func (x *idIndex) at(id string) (*idTable, int) {
	h := maphash.String(x.seed, id)
	t := &x.tabs[0]
	if len(x.tabs) > 1 {
		t = &x.tabs[h>>(64-tablesShift)]
	}
	return t, int(h & uint64(len(t.slots)-1))
}

// find returns the index of the record of id among cs.
func (x *idIndex) find(cs *clientPages, id string) (int32, bool) {
	if x.n == 0 {
		return 0, false
	}
	t, k := x.at(id)
	mask := len(t.slots) - 1
	for ; ; k = (k + 1) & mask {
		switch v := t.slots[k]; {
		case v == 0:
			return 0, false
		case cs.at(v-1).id == id:
			return v - 1, true
		}
	}
}

// add indexes record i of cs, whose id is not indexed yet.
func (x *idIndex) add(cs *clientPages, i int32) {
	switch {
	case x.tabs == nil:
		x.seed = maphash.MakeSeed()
		x.tabs = []idTable{{slots: make([]int32, 8)}}
	case len(x.tabs) == 1 && x.n >= splitAt:
		x.split(cs)
	}
	t, _ := x.at(cs.at(i).id)
	if (t.n+1)*4 > len(t.slots)*maxLoad {
		old := t.slots
		t.slots = make([]int32, 2*len(old))
		for _, v := range old {
			if v != 0 {
				x.place(t, cs, v-1)
			}
		}
	}
	x.place(t, cs, i)
	t.n++
	x.n++
}

// split spreads the one table over tables tables.
func (x *idIndex) split(cs *clientPages) {
	old := x.tabs[0].slots
	x.tabs = make([]idTable, tables)
	for k := range x.tabs {
		x.tabs[k].slots = make([]int32, 2*len(old)/tables)
	}
	for _, v := range old {
		if v != 0 {
			t, _ := x.at(cs.at(v - 1).id)
			x.place(t, cs, v-1)
			t.n++
		}
	}
}

// place puts record i of cs in t's first free slot from its home.
func (x *idIndex) place(t *idTable, cs *clientPages, i int32) {
	_, k := x.at(cs.at(i).id)
	mask := len(t.slots) - 1
	for t.slots[k] != 0 {
		k = (k + 1) & mask
	}
	t.slots[k] = i + 1
}

// slot returns record v-1's table and slot, probing from id's home.
func (x *idIndex) slot(id string, v int32) (*idTable, int) {
	t, k := x.at(id)
	mask := len(t.slots) - 1
	for t.slots[k] != v {
		k = (k + 1) & mask
	}
	return t, k
}

// remove unindexes record i of cs, shifting back the records after it
// that probed past its slot, so no probe meets a gap it should not.
func (x *idIndex) remove(cs *clientPages, i int32) {
	t, k := x.slot(cs.at(i).id, i+1)
	mask := len(t.slots) - 1
	for {
		t.slots[k] = 0
		j := k
		for {
			j = (j + 1) & mask
			v := t.slots[j]
			if v == 0 {
				t.n--
				x.n--
				return
			}
			// The record at j may fill k if its home is not cyclically
			// within (k, j].
			if _, h := x.at(cs.at(v - 1).id); (j-h)&mask >= (j-k)&mask {
				t.slots[k] = v
				k = j
				break
			}
		}
	}
}

// rename records that the record at index from of cs is now at index to
// (cs[to] holds it already; from is being dropped).
func (x *idIndex) rename(cs *clientPages, from, to int32) {
	t, k := x.slot(cs.at(to).id, from+1)
	t.slots[k] = to + 1
}
