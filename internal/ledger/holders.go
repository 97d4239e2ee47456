package ledger

import (
	"hash/fnv"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// Holder promises shorten learning after a takeover.
//
// Learning waits until every lease the predecessor may have issued has
// expired, because a successor cannot know which clients hold them: the
// predecessor's ceiling bounds their sum, but whatever the clients that
// come back do not report (at least the ceiling's headroom) stays held
// back until then. So, for a resource with few clients, the leader also
// records who may hold its leases: their number and a digest of their ids,
// and a time until which it promises to grant nobody else (a new client's
// first grant waits for a record that lists it, like a ceiling raise).
// A successor that hears from exactly those clients, each reporting the
// lease it holds, has accounted for every outstanding lease and ends
// learning at once: within about one refresh interval of the takeover
// instead of a lease length or more.
//
// Proof sketch. Let S be the recorded set and U the promise's end. Every
// client the leader gave a positive lease to while before U is in S (grants to others wait, and a record that drops the
// promise or changes S must be durable before a grant it does not cover).
// The predecessor answered nobody after the successor's takeover (its
// replies stop when its leadership lapses), so if the takeover began
// before U − clock skew, every lease it issued is held by a member of S.
// The successor counts the distinct clients whose first request reports a
// lease (credited if unexpired at the takeover, expired otherwise) and
// sums their hashes; when count and
// digest equal the record's, that set is S (up to a 64-bit hash
// collision), so every predecessor lease still outstanding has been
// reported and credited, and nothing remains unaccounted. A client that does not come back, or a
// client not in S that reports a lease, makes the sets differ: learning
// then runs its normal course. Like learning itself this trusts clients
// to report what they hold.

// MaxRecordedHolders is the most clients a resource's holder promise
// covers; a resource with more is learned the normal way after a
// takeover. The record carries their count and digest whatever their
// number (their ids only while they fit in maxHolderIDBytes), so this
// bounds the work of a write (one pass and one set over the holders) and
// of the successor's bookkeeping, not the record's size.
const MaxRecordedHolders = 1 << 14

// holders is the resource's side of holder promises.
type holders struct {
	// Committed promise: set of ids, until (unix ns; 0 none).
	set   map[string]struct{}
	until int64
	// A proposal in flight with a promise (pendUntil > 0) over pendSet,
	// or (pendUntil == 0) without one; inflight says whether one is.
	inflight  bool
	pendSet   map[string]struct{}
	pendUntil int64

	// Successor side: the predecessor's promise (track), and what first
	// contacts in learning have added up to.
	track      bool
	predIDs    map[string]struct{} // the promised holders, if listed
	predN      uint32
	predDigest uint64
	seenN      uint32
	seenDigest uint64
}

// holderHash is a client id's term of the digest.
func holderHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// mayHold reports whether a grant to client id keeps every promise that is
// or may become durable.
func (r *resource) mayHold(id string, now int64) bool {
	if r.hold.inflight && r.hold.pendUntil > now {
		if _, ok := r.hold.pendSet[id]; !ok {
			return false
		}
	}
	if r.hold.until > now {
		if _, ok := r.hold.set[id]; !ok {
			return false
		}
	}
	return true
}

// promising reports whether the resource's grants are bound by a promise
// now or by one in flight.
func (r *resource) promising(now int64) bool {
	return r.hold.until > now || r.hold.inflight && r.hold.pendUntil > now
}

// holderSnapshot is the promise a proposal carries for one resource.
type holderSnapshot struct {
	set   map[string]struct{}
	until int64 // 0: the record carries no promise
}

// snapshotHolders works out the promise to record for r: every client
// that holds anything, and those of the round that want capacity. None
// while a predecessor's leases are unaccounted for (their holders are not
// known), and none for more than MaxRecordedHolders clients.
func (r *resource) snapshotHolders(now int64) holderSnapshot {
	if !r.shared() || r.unlisted || r.predOutstanding(now) > 0 {
		return holderSnapshot{}
	}
	set := make(map[string]struct{})
	for i := range r.clients {
		c := &r.clients[i]
		// Floors are not promised: a successor counts them apart (the
		// record's floor ceiling, less what clients report).
		if c.leaseExposure(now) > 0 || c.touched && r.demands[i].Wants > 0 {
			if len(set) == MaxRecordedHolders {
				return holderSnapshot{}
			}
			set[c.id] = struct{}{}
		}
	}
	return holderSnapshot{set: set, until: now + int64(r.tmpl.LeaseLength)}
}

// needsHolders reports whether a client of the round that wants capacity
// may not be granted it until a record lists it.
func (r *resource) needsHolders(now int64) bool {
	if !r.promising(now) {
		return false
	}
	for _, i := range r.batch {
		if r.demands[i].Wants > 0 && !r.mayHold(r.clients[i].id, now) {
			return true
		}
	}
	return false
}

// summary adds the promise to a record entry.
func (s holderSnapshot) summary(e *allotpb.ResourceSummary) *allotpb.ResourceSummary {
	if s.until == 0 {
		return e
	}
	var d uint64
	for id := range s.set {
		d += holderHash(id)
	}
	e.Holders, e.HoldersDigest = uint32(len(s.set)), d
	e.HoldersUntil = timestamppb.New(time.Unix(0, s.until))
	return e
}

// trackPredecessor takes the predecessor's promise for r, if it covers
// the takeover at learnStart.
func (r *resource) trackPredecessor(pred *allotpb.ResourceSummary) {
	u := pred.GetHoldersUntil()
	if u == nil || r.learnStart+r.skew >= u.AsTime().UnixNano() {
		return
	}
	r.hold.track, r.hold.predN, r.hold.predDigest = true, pred.GetHolders(), pred.GetHoldersDigest()
	if ids := pred.GetHolderIds(); len(ids) > 0 && len(ids) == int(pred.GetHolders()) {
		r.hold.predIDs = make(map[string]struct{}, len(ids))
		for _, id := range ids {
			r.hold.predIDs[id] = struct{}{}
		}
	}
}

// predHolder reports whether client id may hold a predecessor's lease:
// true unless the predecessor's promise lists its holders and id is not
// one of them.
func (r *resource) predHolder(id string) bool {
	if r.hold.predIDs == nil {
		return true
	}
	_, ok := r.hold.predIDs[id]
	return ok
}

// maxHolderIDBytes bounds the holder ids one record lists, in all.
const maxHolderIDBytes = 64 << 10

// listHolderIDs adds the holders' ids to the entries that carry a promise,
// in resource order, while they fit in budget bytes (as protojson).
func listHolderIDs(entries map[string]*allotpb.ResourceSummary, snaps map[string]holderSnapshot, budget int) {
	ids := make([]string, 0, len(snaps))
	for id := range snaps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, rid := range ids {
		s, e := snaps[rid], entries[rid]
		if s.until == 0 || e == nil {
			continue
		}
		n := 16 // "holderIds":[],
		for id := range s.set {
			n += jsonStringBytes(id) + 3
		}
		if n > budget {
			continue
		}
		budget -= n
		e.HolderIds = make([]string, 0, len(s.set))
		for id := range s.set {
			e.HolderIds = append(e.HolderIds, id)
		}
		slices.Sort(e.HolderIds)
	}
}

// heard counts a first contact in learning that reports a lease, live
// or expired (a client that held one), and ends learning when the
// promised holders have all been heard. A holder whose lease expired
// before the takeover is accounted for as well as one that reports a
// live lease (credited): what it no longer holds needs no credit. A
// client that reports nothing, or a stranger, makes the count or the
// digest differ.
func (r *resource) heard(now int64, id string) {
	if !r.hold.track {
		return
	}
	r.hold.seenN++
	r.hold.seenDigest += holderHash(id)
	r.endIfAllHeard(now)
}

// endIfAllHeard ends learning once the clients heard are exactly the
// promised holders: no predecessor lease is unaccounted for.
func (r *resource) endIfAllHeard(now int64) {
	if r.hold.track && r.hold.seenN == r.hold.predN && r.hold.seenDigest == r.hold.predDigest && r.learning(now) {
		r.learningUntil = now
		r.hold.track = false
	}
}
