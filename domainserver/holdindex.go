package domainserver

import (
	"crypto/rand"
	"encoding/binary"
)

// holdIndex finds the holds by id. A server under load keeps a hold per
// reserve for a hold TTL, hundreds of thousands of them: in a hash map
// every reserve's insert and every expiry's delete probed a table far
// larger than the caches (a third of a reserve's CPU). So the holds this
// server reserves get an id that names their slot in a slice (4 bytes of
// slot, 8 random), found and dropped without hashing; the holds whose id
// it did not make (adopted from a refresh, made by a seize) are in a map.
// A slot's id is checked whole, so an id of another leader that names a
// slot is looked up in the map.
type holdIndex struct {
	slots []*hold
	free  []uint32 // slots with no hold, the last freed last
	// others are the holds whose id names no slot of slots.
	others map[string]*hold
	n      int
	// random is read from crypto/rand a batch at a time (one read per
	// id cost a tenth of a reserve); used is how much of it is spent.
	random [512]byte
	used   int
}

// random8 fills b with 8 random bytes.
func (x *holdIndex) random8(b []byte) {
	if x.used == 0 || x.used+8 > len(x.random) {
		_, _ = rand.Read(x.random[:]) // never fails (crypto/rand)
		x.used = 0
	}
	copy(b, x.random[x.used:x.used+8])
	clear(x.random[x.used : x.used+8]) // an id's bytes are not kept
	x.used += 8
}

// get returns the hold with id, or nil.
func (x *holdIndex) get(id string) *hold {
	if slot, ok := slotOf(id); ok && slot < uint32(len(x.slots)) {
		if h := x.slots[slot]; h != nil && h.id == id {
			return h
		}
	}
	return x.others[id]
}

// len returns how many holds x has.
func (x *holdIndex) len() int { return x.n }

// reserve files h under a new id of a free slot, which it sets.
func (x *holdIndex) reserve(h *hold) {
	for {
		var slot uint32
		if n := len(x.free); n > 0 {
			slot, x.free = x.free[n-1], x.free[:n-1]
		} else {
			slot = uint32(len(x.slots))
			x.slots = append(x.slots, nil)
		}
		var b [12]byte
		binary.BigEndian.PutUint32(b[:4], slot)
		x.random8(b[4:])
		var id [20]byte
		idEncoding.Encode(id[:], b[:])
		if x.others[string(id[:])] != nil {
			// An adopted hold has this id (one chance in 2^64): another.
			x.free = append(x.free, slot)
			continue
		}
		h.id = string(id[:])
		x.slots[slot] = h
		x.n++
		return
	}
}

// put files h under its id, which no hold of x has.
func (x *holdIndex) put(h *hold) {
	if x.others == nil {
		x.others = make(map[string]*hold)
	}
	x.others[h.id] = h
	x.n++
}

// remove drops h, which x has. Once x is empty it gives back its room:
// memory follows the live holds.
func (x *holdIndex) remove(h *hold) {
	if slot, ok := slotOf(h.id); ok && slot < uint32(len(x.slots)) && x.slots[slot] == h {
		x.slots[slot] = nil
		x.free = append(x.free, slot)
	} else {
		delete(x.others, h.id)
	}
	if x.n--; x.n == 0 {
		*x = holdIndex{}
	}
}

// all calls f with every hold.
func (x *holdIndex) all(f func(*hold)) {
	for _, h := range x.slots {
		if h != nil {
			f(h)
		}
	}
	for _, h := range x.others {
		f(h)
	}
}

// slotOf returns the slot an id names, if it is one of the 20-character
// ids holdIndex.reserve makes. It reads only the 7 characters that carry
// the slot (every expiry and lookup asks; decoding the whole id was a
// third of an expiry): the caller checks the rest against the slot's
// hold.
func slotOf(id string) (uint32, bool) {
	if len(id) != 20 {
		return 0, false
	}
	var v uint64
	for i := range 7 {
		c := id[i]
		var d byte
		switch {
		case 'a' <= c && c <= 'z':
			d = c - 'a'
		case '2' <= c && c <= '7':
			d = c - '2' + 26
		default:
			return 0, false
		}
		v = v<<5 | uint64(d)
	}
	return uint32(v >> 3), true // 35 bits read, the slot is the first 32
}
