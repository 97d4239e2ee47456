package ledger

import (
	"cmp"
	"hash/maphash"
)

// idIndex finds a resource's client record by its id: open-addressing
// hash tables (linear probing) of client indices, 4 bytes a slot and
// fewer than two slots a record, where a map[string]int32 took about
// forty bytes a record (its own copy of the id's string header among
// them). The ids themselves are the records'.
//
// A slot also holds eight bits of its id's hash (a fingerprint) above
// the index, so that a probe passing another record's slot reads neither
// that record nor its id (two cache lines at scale, where a probe passes
// one or two others on average) but for one in 256. An index past
// fingerprinted records (some sixteen million) gives them up for the
// whole 32 bits of the index (wide).
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
	wide bool // slots hold no fingerprints
	// limit is the most client index + 1 kept with a fingerprint
	// (0: fingerprinted); tests set a lower one to widen early.
	limit uint32
}

type idTable struct {
	// slots hold client index + 1 below fpShift and the id's fingerprint
	// above (the whole index if wide); 0 is empty.
	slots []uint32
	n     int
}

// fpShift is where a slot's fingerprint begins; fingerprinted the most
// client indices + 1 a slot holds with one.
const (
	fpShift       = 24
	fingerprinted = 1<<fpShift - 1
)

const (
	// maxLoad is the most records per slot, in quarters.
	maxLoad = 3
	// tables is how many tables a large index has; splitAt the records
	// at which it gets them.
	tablesShift = 6
	tables      = 1 << tablesShift
	splitAt     = 1 << 16
)

// at returns the table id belongs in, the slot it probes from, and the
// fingerprint its slot holds (0 if wide), from bits of the hash the
// table and slot are not chosen by (a table has fewer than 2^48 slots).
func (x *idIndex) at(id string) (*idTable, int, uint32) {
	h := maphash.String(x.seed, id)
	t := &x.tabs[0]
	if len(x.tabs) > 1 {
		t = &x.tabs[h>>(64-tablesShift)]
	}
	fp := (uint32(h>>48) & 0xff) << fpShift
	if x.wide {
		fp = 0
	}
	return t, int(h & uint64(len(t.slots)-1)), fp
}

// index is the client index + 1 slot value v holds.
func (x *idIndex) index(v uint32) int32 {
	if x.wide {
		return int32(v)
	}
	return int32(v & (1<<fpShift - 1))
}

// find returns the index of the record of id among cs.
func (x *idIndex) find(cs *clientPages, id string) (int32, bool) {
	if x.n == 0 {
		return 0, false
	}
	t, k, fp := x.at(id)
	mask := len(t.slots) - 1
	for ; ; k = (k + 1) & mask {
		v := t.slots[k]
		if v == 0 {
			return 0, false
		}
		if x.wide || v&^(1<<fpShift-1) == fp {
			if i := x.index(v) - 1; cs.at(i).id == id {
				return i, true
			}
		}
	}
}

// add indexes record i of cs, whose id is not indexed yet.
func (x *idIndex) add(cs *clientPages, i int32) {
	switch {
	case x.tabs == nil:
		x.seed = maphash.MakeSeed()
		x.tabs = []idTable{{slots: make([]uint32, 8)}}
	case len(x.tabs) == 1 && x.n >= splitAt:
		x.split(cs)
	}
	if limit := x.limit; !x.wide && uint32(i)+1 > cmp.Or(limit, fingerprinted) {
		x.widen(cs)
	}
	t, _, _ := x.at(cs.at(i).id)
	if (t.n+1)*4 > len(t.slots)*maxLoad {
		old := t.slots
		t.slots = make([]uint32, 2*len(old))
		for _, v := range old {
			if v != 0 {
				x.place(t, cs, x.index(v)-1)
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
		x.tabs[k].slots = make([]uint32, 2*len(old)/tables)
	}
	for _, v := range old {
		if v != 0 {
			i := x.index(v) - 1
			t, _, _ := x.at(cs.at(i).id)
			x.place(t, cs, i)
			t.n++
		}
	}
}

// widen gives up the fingerprints: the slots are rewritten in place
// (their order does not depend on them), once, at fingerprinted records.
func (x *idIndex) widen(cs *clientPages) {
	for k := range x.tabs {
		for j, v := range x.tabs[k].slots {
			x.tabs[k].slots[j] = uint32(x.index(v))
		}
	}
	x.wide = true
}

// place puts record i of cs in t's first free slot from its home.
func (x *idIndex) place(t *idTable, cs *clientPages, i int32) {
	_, k, fp := x.at(cs.at(i).id)
	mask := len(t.slots) - 1
	for t.slots[k] != 0 {
		k = (k + 1) & mask
	}
	t.slots[k] = fp | uint32(i+1)
}

// slot returns record v-1's table and slot, probing from id's home.
func (x *idIndex) slot(id string, v int32) (*idTable, int) {
	t, k, _ := x.at(id)
	mask := len(t.slots) - 1
	for x.index(t.slots[k]) != v {
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
			if _, h, _ := x.at(cs.at(x.index(v) - 1).id); (j-h)&mask >= (j-k)&mask {
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
	t.slots[k] = t.slots[k]&^uint32(x.index(t.slots[k])) | uint32(to+1)
}
