package domainserver

import (
	"crypto/rand"
	"encoding/binary"
	"slices"
	"time"
)

// hold is copies of a copy-limited resource held by one client. A server
// under load keeps a hold per reserve for a hold TTL, hundreds of
// thousands of them, so a hold has no pointers: the holds sit in chunks
// the garbage collector does not scan (scanning them, and allocating one
// object per hold, cost more than the seal), and what holds share (the
// client, resource, domain and groups) is in a holdKey they name.
// A *hold is valid until the hold is removed from its store.
type hold struct {
	// random is the random part of the id the store made for it.
	random uint64
	copies int64
	// expires is the hold's expiry, as an offset from Server.epoch.
	expires time.Duration
	// slot is where the hold is in its store; key its holdKey there.
	slot, key uint32
	// prev and next link the holds in expiry order: slot+1, 0 for none.
	prev, next uint32
	// live: the slot has a hold. foreign: its id is not one the store
	// made (adopted from a refresh, made by a seize).
	live, foreign bool
}

// holdKey is what the holds of one client, resource, domain and groups
// share, with how many holds refer to it.
type holdKey struct {
	clientID string
	res      *resource
	domain   string
	groups   []string
	refs     int
}

// keyName writes the name under which resource.keys finds the holdKey
// of a client and domain (holdKeys of other groups for them are kept
// apart, unnamed) into buf: the client's length, the client and the
// domain. A string key is hashed once where a struct of the resource and
// both strings was hashed field by field (a tenth of a reserve).
func keyName(buf []byte, clientID, domain string) []byte {
	b := binary.AppendUvarint(buf[:0], uint64(len(clientID)))
	return append(append(b, clientID...), domain...)
}

// chunkLen is how many holds a chunk of the store has.
const chunkLen = 1024

// holdStore keeps the holds, finds them by id and keeps them in expiry
// order. The ids it makes name the hold's slot (4 bytes of slot, 8
// random), so a hold is found and dropped without hashing (in a hash map
// every reserve's insert and every expiry's delete probed a table far
// larger than the caches); the holds whose id it did not make are in a
// map. A slot's id is checked whole, so an id of another leader that
// names a slot is looked up in the map.
type holdStore struct {
	chunks [][]hold
	used   uint32   // slots ever used since the store was empty
	free   []uint32 // slots with no hold, the last freed last
	// others finds the foreign holds by id, and foreign has their ids.
	others  map[string]uint32
	foreign map[uint32]string
	// keys are the holdKeys by index (nil: free); their resources name
	// those found by name (resource.keys).
	keys     []*holdKey
	freeKeys []uint32
	// front and back are the soonest and latest expiring holds, slot+1.
	front, back uint32
	n           int
	// random is read from crypto/rand a batch at a time (one read per
	// id cost a tenth of a reserve); spent is how much of it is used.
	random [512]byte
	spent  int
}

// at returns the hold in slot.
func (x *holdStore) at(slot uint32) *hold { return &x.chunks[slot/chunkLen][slot%chunkLen] }

// key returns h's holdKey.
func (x *holdStore) key(h *hold) *holdKey { return x.keys[h.key] }

// len returns how many holds x has.
func (x *holdStore) len() int { return x.n }

// random8 returns 8 random bytes.
func (x *holdStore) random8() uint64 {
	if x.spent == 0 || x.spent+8 > len(x.random) {
		_, _ = rand.Read(x.random[:]) // never fails (crypto/rand)
		x.spent = 0
	}
	v := binary.BigEndian.Uint64(x.random[x.spent:])
	clear(x.random[x.spent : x.spent+8]) // an id's bytes are not kept
	x.spent += 8
	return v
}

// ownID writes the id x made for the hold in slot with random.
func ownID(out *[20]byte, slot uint32, random uint64) {
	var b [12]byte
	binary.BigEndian.PutUint32(b[:4], slot)
	binary.BigEndian.PutUint64(b[4:], random)
	idEncoding.Encode(out[:], b[:])
}

// id returns h's id.
func (x *holdStore) id(h *hold) string {
	if h.foreign {
		return x.foreign[h.slot]
	}
	var id [20]byte
	ownID(&id, h.slot, h.random)
	return string(id[:])
}

// appendID appends h's id to b.
func (x *holdStore) appendID(b []byte, h *hold) []byte {
	if h.foreign {
		return append(b, x.foreign[h.slot]...)
	}
	var id [20]byte
	ownID(&id, h.slot, h.random)
	return append(b, id[:]...)
}

// get returns the hold with id, or nil.
func (x *holdStore) get(id string) *hold {
	if slot, ok := slotOf(id); ok && slot < x.used {
		if h := x.at(slot); h.live && !h.foreign {
			var mine [20]byte
			ownID(&mine, slot, h.random)
			if string(mine[:]) == id {
				return h
			}
		}
	}
	if slot, ok := x.others[id]; ok {
		return x.at(slot)
	}
	return nil
}

// add files a new hold of clientID on res, domain and groups, with an
// id of its own if id is empty, at the back of the expiry order. It
// returns the hold, whose copies and expiry the caller sets.
func (x *holdStore) add(id, clientID string, res *resource, domain string, groups []string) *hold {
	var slot uint32
	for {
		if n := len(x.free); n > 0 {
			slot, x.free = x.free[n-1], x.free[:n-1]
		} else {
			slot = x.used
			if slot%chunkLen == 0 {
				x.chunks = append(x.chunks, make([]hold, chunkLen))
			}
			x.used++
		}
		if id != "" {
			break
		}
		random := x.random8()
		if len(x.others) == 0 || !x.takenByOther(slot, random) {
			*x.at(slot) = hold{random: random}
			break
		}
		// A foreign hold has this id (one chance in 2^64): another.
		x.free = append(x.free, slot)
	}
	h := x.at(slot)
	if id != "" {
		*h = hold{foreign: true}
		if x.others == nil {
			x.others, x.foreign = make(map[string]uint32), make(map[uint32]string)
		}
		x.others[id], x.foreign[slot] = slot, id
	}
	h.slot, h.live, h.key = slot, true, x.keyFor(clientID, res, domain, groups)
	x.n++
	x.pushBack(h)
	return h
}

// takenByOther reports whether a foreign hold has the id of slot and
// random.
func (x *holdStore) takenByOther(slot uint32, random uint64) bool {
	var id [20]byte
	ownID(&id, slot, random)
	_, taken := x.others[string(id[:])]
	return taken
}

// keyFor returns the index of a holdKey for a new hold, one more hold
// referring to it.
func (x *holdStore) keyFor(clientID string, res *resource, domain string, groups []string) uint32 {
	var buf [96]byte
	name := keyName(buf[:], clientID, domain)
	i, named := res.keys[string(name)]
	if named && slices.Equal(x.keys[i].groups, groups) {
		x.keys[i].refs++
		return i
	}
	k := &holdKey{clientID: clientID, res: res, domain: domain, groups: groups, refs: 1}
	if n := len(x.freeKeys); n > 0 {
		i, x.freeKeys = x.freeKeys[n-1], x.freeKeys[:n-1]
		x.keys[i] = k
	} else {
		i = uint32(len(x.keys))
		x.keys = append(x.keys, k)
	}
	if !named {
		if res.keys == nil {
			res.keys = make(map[string]uint32)
		}
		res.keys[string(name)] = i
	}
	return i
}

// remove drops h, which x has. Once x is empty it gives back its room:
// memory follows the live holds.
func (x *holdStore) remove(h *hold) {
	x.unlink(h)
	if h.foreign {
		delete(x.others, x.foreign[h.slot])
		delete(x.foreign, h.slot)
	}
	k := x.keys[h.key]
	if k.refs--; k.refs == 0 {
		var buf [96]byte
		if name := keyName(buf[:], k.clientID, k.domain); k.res.keys[string(name)] == h.key {
			if delete(k.res.keys, string(name)); len(k.res.keys) == 0 {
				k.res.keys = nil // its room goes with the holds
			}
		}
		x.keys[h.key] = nil
		x.freeKeys = append(x.freeKeys, h.key)
	}
	x.free = append(x.free, h.slot)
	*h = hold{}
	if x.n--; x.n == 0 {
		*x = holdStore{}
	}
}

// all calls f with every hold.
func (x *holdStore) all(f func(*hold)) {
	for slot := range x.used {
		if h := x.at(slot); h.live {
			f(h)
		}
	}
}

// first returns the hold that expires soonest, or nil.
func (x *holdStore) first() *hold {
	if x.front == 0 {
		return nil
	}
	return x.at(x.front - 1)
}

// pushBack appends h, which is in no list, to the expiry order.
func (x *holdStore) pushBack(h *hold) {
	h.prev, h.next = x.back, 0
	if x.back == 0 {
		x.front = h.slot + 1
	} else {
		x.at(x.back - 1).next = h.slot + 1
	}
	x.back = h.slot + 1
}

// unlink takes h out of the expiry order.
func (x *holdStore) unlink(h *hold) {
	if h.prev == 0 {
		x.front = h.next
	} else {
		x.at(h.prev - 1).next = h.next
	}
	if h.next == 0 {
		x.back = h.prev
	} else {
		x.at(h.next - 1).prev = h.prev
	}
	h.prev, h.next = 0, 0
}

// moveToBack moves h to the back of the expiry order.
func (x *holdStore) moveToBack(h *hold) {
	if x.back == h.slot+1 {
		return
	}
	x.unlink(h)
	x.pushBack(h)
}

// slotOf returns the slot an id names, if it is one of the 20-character
// ids holdStore.add makes. It reads only the 7 characters that carry
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
