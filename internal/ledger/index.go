package ledger

import "hash/maphash"

// idIndex finds a resource's client record by its id: an open-addressing
// hash table (linear probing) of client indices, 4 bytes a slot and
// fewer than two slots a record, where a map[string]int32 took about
// forty bytes a record (its own copy of the id's string header among
// them). The ids themselves are the records'.
type idIndex struct {
	seed  maphash.Seed
	slots []int32 // client index + 1; 0 is empty
	n     int
}

// maxLoad is the most records per slot, in quarters: past three
// quarters full the table doubles.
const maxLoad = 3

func (x *idIndex) home(id string) int {
	return int(maphash.String(x.seed, id) & uint64(len(x.slots)-1))
}

// find returns the index of the record of id among cs.
func (x *idIndex) find(cs *clientPages, id string) (int32, bool) {
	if x.n == 0 {
		return 0, false
	}
	mask := len(x.slots) - 1
	for k := x.home(id); ; k = (k + 1) & mask {
		switch v := x.slots[k]; {
		case v == 0:
			return 0, false
		case cs.at(v-1).id == id:
			return v - 1, true
		}
	}
}

// add indexes record i of cs, whose id is not indexed yet.
func (x *idIndex) add(cs *clientPages, i int32) {
	if (x.n+1)*4 > len(x.slots)*maxLoad {
		x.grow(cs)
	}
	x.place(cs.at(i).id, i)
	x.n++
}

func (x *idIndex) place(id string, i int32) {
	mask := len(x.slots) - 1
	k := x.home(id)
	for x.slots[k] != 0 {
		k = (k + 1) & mask
	}
	x.slots[k] = i + 1
}

// grow doubles the table (the first one has 8 slots).
func (x *idIndex) grow(cs *clientPages) {
	old := x.slots
	if x.slots == nil {
		x.seed = maphash.MakeSeed()
	}
	x.slots = make([]int32, max(2*len(old), 8))
	for _, v := range old {
		if v != 0 {
			x.place(cs.at(v-1).id, v-1)
		}
	}
}

// slot returns the slot holding record i of cs (which is indexed).
func (x *idIndex) slot(cs *clientPages, i int32) int {
	mask := len(x.slots) - 1
	k := x.home(cs.at(i).id)
	for x.slots[k] != i+1 {
		k = (k + 1) & mask
	}
	return k
}

// remove unindexes record i of cs, shifting back the records after it
// that probed past its slot, so no probe meets a gap it should not.
func (x *idIndex) remove(cs *clientPages, i int32) {
	mask := len(x.slots) - 1
	k := x.slot(cs, i)
	for {
		x.slots[k] = 0
		j := k
		for {
			j = (j + 1) & mask
			v := x.slots[j]
			if v == 0 {
				x.n--
				return
			}
			// The record at j may fill k if its home is not cyclically
			// within (k, j].
			if h := x.home(cs.at(v - 1).id); (j-h)&mask >= (j-k)&mask {
				x.slots[k] = v
				k = j
				break
			}
		}
	}
}

// rename records that the record at index from of cs is now at index to
// (cs.at(to) holds it already; from is being dropped).
func (x *idIndex) rename(cs *clientPages, from, to int32) {
	mask := len(x.slots) - 1
	k := x.home(cs.at(to).id)
	for x.slots[k] != from+1 {
		k = (k + 1) & mask
	}
	x.slots[k] = to + 1
}
