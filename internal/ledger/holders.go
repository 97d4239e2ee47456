package ledger

import (
	"math"
	"slices"
	"time"

	"github.com/minio/highwayhash"
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
// collision: the hashes are keyed, see holderHash, so nobody can choose
// ids that collide), so every predecessor lease still outstanding has been
// reported and credited, and nothing remains unaccounted. A client that does not come back, or a
// client not in S that reports a lease, makes the sets differ: learning
// then runs its normal course. Like learning itself this trusts clients
// to report what they hold.

// MaxRecordedHolders is the most clients a resource's holder promise
// covers; a resource with more is learned the normal way after a
// takeover. The record carries their count and digest whatever their
// number (their ids only while they fit in maxHolderIDBytes), so this
// bounds the successor's bookkeeping and the pass over the holders a
// write makes when it cannot go by what changed, not the record's size.
const MaxRecordedHolders = 1 << 14

// holders is the resource's side of holder promises.
//
// A promise's set is not built anew for each record: that cost a pass
// over every client of every listed resource on each write, which a
// newcomer's first grant needs, so a round of newcomers cost O(n) of all
// the clients. Instead the clients with a lease exposure above 0 (listed)
// are counted as they change (list, from the running sums' recount),
// with the sum of their hashes and of their ids' bytes, and each client
// carries since: the number of the first snapshot of an unbroken run of
// snapshots that included it (0: none). A snapshot takes the running
// figures, adds the round's clients that want capacity, and visits only
// the clients whose membership may have changed since the last one
// (joined, dropped, and the last one's wanters), so a write costs what
// changed. A client is in snapshot s while since != 0 and since <= s: its
// run began by s and has not ended at any snapshot since (runs end only
// at a snapshot that leaves the client out). A client left out of a
// snapshot and included again later starts a new run, so it reads as
// absent from the earlier one, and so does a client whose record was
// dropped (a release) and made anew: that only makes its grant wait for
// the next write (safe; the randomized trials compare every decision
// with sets built from scratch).
type holders struct {
	// Committed promise: its snapshot (cseq; after a failed write that
	// may have been stored, the older of the two, whose members in both
	// are the ones with since <= cseq) and its end, until (unix ns; 0
	// none).
	cseq  uint32
	until int64
	// A proposal in flight with a promise (pendUntil > 0) of snapshot
	// pseq, or (pendUntil == 0) without one; inflight says whether one is.
	inflight  bool
	pseq      uint32
	pendUntil int64

	// seq numbers the snapshots with a promise. n, digest and bytes
	// count the listed clients: their number, the sum of their hashes,
	// and their ids' bytes in a record's JSON.
	seq    uint32
	n      uint32
	digest uint64
	bytes  int
	// exact says the clients' since are kept up to date: joined and
	// dropped list the ids listed and unlisted since the last snapshot,
	// wanted the last snapshot's clients included only for wanting. When
	// not exact, the next snapshot visits every client.
	exact                   bool
	joined, dropped, wanted []string
	// ids lists the listed clients, sorted, as a snapshot without
	// wanting clients last listed them; idsOK says nobody was listed or
	// unlisted since, so the next such snapshot takes it as it is
	// instead of walking every record and sorting again (in a steady
	// node, most of what a write costs its round). Records share it: it
	// is never written after it is made.
	ids   []string
	idsOK bool

	// key is this leader's holder digest key (nil: it records no
	// promise); predKey the predecessor's, which its digest is under.
	key, predKey *[HolderKeySize]byte

	// Successor side: the predecessor's promise (track), and what first
	// contacts in learning have added up to.
	track      bool
	predIDs    map[string]struct{} // the promised holders, if listed
	predN      uint32
	predDigest uint64
	// predUnlisted bounds the predecessor's floors held outside its
	// promise (-1: not recorded, so not bounded).
	predUnlisted float64
	seenN        uint32
	seenDigest   uint64
}

// maxHolderChanges bounds the ids a resource keeps between snapshots
// (joined and dropped); past it the next snapshot visits every client.
const maxHolderChanges = 2 * MaxRecordedHolders

// HolderKeySize is the size of the key holder digests are keyed with
// (Config.HolderKey).
const HolderKeySize = highwayhash.Size

// holderHash is a client id's term of the digest under key: HighwayHash,
// a keyed pseudorandom function. A digest summed unkeyed hashes once
// (FNV-1a), which anyone could match with made-up ids: a sum mod 2^64 of
// hashes of ids one chooses is a generalized birthday problem, solved in
// about 2^20 hashes for eight ids (holders_forge_test.go), and a
// successor that took the match for its holders' return would lease out
// what the missing ones still hold. Under a secret key the hashes cannot
// be computed, so a made-up set matches with probability 2^-64. It costs
// about what FNV-1a did (under 50 ns for an agent's id, no allocation:
// BenchmarkHolderHash), so it is not cached per client.
func holderHash(key *[HolderKeySize]byte, id string) uint64 {
	return highwayhash.Sum64([]byte(id), key[:])
}

// holderIDBytes is what id adds to a record's holder ids as JSON.
func holderIDBytes(id string) int { return jsonStringBytes(id) + 3 }

// list counts c in (in) or out of the listed clients: the running sums
// call it when c's lease exposure counted turns positive or 0.
func (h *holders) list(c *client, in bool) {
	h.idsOK = false
	var d uint64
	if h.key != nil {
		d = holderHash(h.key, c.id)
	}
	b := holderIDBytes(c.id)
	if in {
		h.n++
		h.digest += d
		h.bytes += b
	} else {
		h.n--
		h.digest -= d
		h.bytes -= b
	}
	if !h.exact {
		return
	}
	if in {
		h.joined = append(h.joined, c.id)
	} else {
		h.dropped = append(h.dropped, c.id)
	}
	if len(h.joined)+len(h.dropped) > maxHolderChanges {
		h.forget()
	}
}

// renumber starts the snapshots' numbers again, once they run out: every
// run ends (since 0) and the committed promise then names nobody, so
// grants wait for the next write, as a newcomer's do. No write is in
// flight: a snapshot is taken only when one may start.
func (h *holders) renumber() {
	h.seq, h.cseq, h.pseq = 0, 0, 0
	h.forget()
}

// forget stops keeping the clients' since: the next snapshot visits them
// all.
func (h *holders) forget() {
	h.exact = false
	clear(h.joined)
	clear(h.dropped)
	clear(h.wanted)
	h.joined, h.dropped, h.wanted = h.joined[:0], h.dropped[:0], h.wanted[:0]
}

// relistAll recounts the listed clients from scratch (the running sums
// were counted anew, after the clock went back).
func (r *resource) relistAll() {
	r.hold.n, r.hold.digest, r.hold.bytes = 0, 0, 0
	r.hold.ids, r.hold.idsOK = nil, false
	r.hold.forget()
	for i := range r.clients.len() {
		if c := r.clients.at(i); c.listed() {
			r.hold.list(c, true)
		}
	}
}

// listed reports whether c is counted among the listed clients: its
// lease exposure, as last counted, is above 0.
func (c *client) listed() bool { return c.n.lease > 0 }

// promised reports whether a snapshot taken now would include c: it
// holds a lease, or asks this round for capacity.
func (c *client) promised() bool { return c.listed() || c.touched() && c.wants > 0 }

// mayHold reports whether a grant to client id keeps every promise that is
// or may become durable.
func (r *resource) mayHold(id string, now int64) bool {
	if i, ok := r.lookup(id); ok {
		return r.mayHoldClient(r.clients.at(i), now)
	}
	return !r.promising(now)
}

// mayHoldClient is mayHold for a client record.
func (r *resource) mayHoldClient(c *client, now int64) bool {
	h := &r.hold
	if h.inflight && h.pendUntil > now && (c.since == 0 || c.since > h.pseq) {
		return false
	}
	if h.until > now && (c.since == 0 || c.since > h.cseq) {
		return false
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
	r      *resource
	seq    uint32
	until  int64 // 0: the record carries no promise
	n      uint32
	digest uint64
	bytes  int // the ids' bytes in the record's JSON
	// unlisted bounds the floors of the clients outside the promise.
	unlisted float64
	// wanting: the promise names clients beyond the listed ones (those
	// of the round that want capacity).
	wanting bool
}

// snapshotHolders works out the promise to record for r: every client
// that holds anything, and those of the round that want capacity. None
// while a predecessor's leases are unaccounted for (their holders are not
// known), none for more than MaxRecordedHolders clients, and none
// without a key to make the digest with. It costs
// the clients whose membership changed since the last snapshot, unless
// the clients' since are not kept (then all of them).
func (r *resource) snapshotHolders(now int64) holderSnapshot {
	h := &r.hold
	if !r.shared() || r.unlisted || h.key == nil || r.predOutstanding(now) > 0 {
		h.forget()
		return holderSnapshot{}
	}
	r.sync(now)
	if r.sums.leased > MaxRecordedHolders {
		h.forget()
		return holderSnapshot{} // too many to promise, known without a look
	}
	if h.seq == math.MaxUint32 {
		h.renumber()
	}
	h.seq++
	s := h.seq
	// Runs end for whoever is left out; runs begin for whoever is in and
	// was not. The since of the others is right: every snapshot since
	// the last one that visited them all came here with exact set.
	mark := func(c *client) {
		switch {
		case !c.promised():
			c.since = 0
		case c.since == 0:
			c.since = s
		}
	}
	if !h.exact {
		for i := range r.clients.len() {
			c := r.clients.at(i)
			if h.seq == 1 {
				c.since = 0 // numbers start again: no run is older
			}
			mark(c)
		}
	} else {
		for _, ids := range [...][]string{h.dropped, h.wanted, h.joined} {
			for _, id := range ids {
				if i, ok := r.lookup(id); ok { // else gone: its record is dropped
					mark(r.clients.at(i))
				}
			}
		}
	}
	h.forget()
	h.exact = true
	snap := holderSnapshot{r: r, seq: s, n: h.n, digest: h.digest, bytes: h.bytes}
	for _, i := range r.batch {
		c := r.clients.at(i)
		if c.wants > 0 && !c.listed() {
			snap.n++
			snap.digest += holderHash(h.key, c.id)
			snap.bytes += holderIDBytes(c.id)
			h.wanted = append(h.wanted, c.id)
			snap.wanting = true
			if c.since == 0 {
				c.since = s
			}
		}
	}
	if snap.n > MaxRecordedHolders {
		h.forget()
		return holderSnapshot{}
	}
	snap.until = now + int64(r.tmpl.LeaseLength)
	snap.unlisted = r.unlistedFloors(now)
	return snap
}

// needsHolders reports whether a client of the round that wants capacity
// may not be granted it until a record lists it.
func (r *resource) needsHolders(now int64) bool {
	if !r.promising(now) {
		return false
	}
	for _, i := range r.batch {
		if c := r.clients.at(i); c.wants > 0 && !r.mayHoldClient(c, now) {
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
	e.Holders, e.HoldersDigest = s.n, s.digest
	e.HoldersUntil = timestamppb.New(time.Unix(0, s.until))
	e.UnlistedFloors = &s.unlisted
	return e
}

// listable reports whether ids may walk the resource's client records:
// only while they are at most a few times the holders, so that listing
// costs a bounded multiple of what it lists. Records kept for clients
// that hold nothing (lapsed, or asking for 0) would otherwise make every
// write walk them all. A promise without ids is as safe: the successor
// then takes any client that reports a lease for a possible holder.
func (s holderSnapshot) listable() bool {
	return int(s.r.clients.len()) <= maxRecordsPerListedHolder*int(s.n)+minRecordsListed
}

// A resource's holder ids are listed while its client records are at
// most maxRecordsPerListedHolder per holder, plus minRecordsListed.
const (
	maxRecordsPerListedHolder = 4
	minRecordsListed          = 64
)

// ids lists the snapshot's holders, sorted; it is called in the round
// the snapshot was taken, so the clients' marks are still its.
func (s holderSnapshot) ids() []string {
	h := &s.r.hold
	if !s.wanting && h.idsOK {
		return h.ids
	}
	ids := make([]string, 0, s.n)
	for i := range s.r.clients.len() {
		if c := s.r.clients.at(i); c.promised() {
			ids = append(ids, c.id)
		}
	}
	slices.Sort(ids)
	if !s.wanting {
		h.ids, h.idsOK = ids, true
	}
	return ids
}

// trackPredecessor takes the predecessor's promise for r, if it covers
// the takeover at learnStart, with key the record's digest key. A record
// without a key (an older version's) has a digest anyone can match: its
// promise still says who may claim a lease (its ids, if listed), but
// hearing its holders ends nothing.
func (r *resource) trackPredecessor(pred *allotpb.ResourceSummary, key *[HolderKeySize]byte) {
	u := pred.GetHoldersUntil()
	if u == nil || r.learnStart+r.skew >= u.AsTime().UnixNano() {
		return
	}
	if ids := pred.GetHolderIds(); len(ids) > 0 && len(ids) == int(pred.GetHolders()) {
		r.hold.predIDs = make(map[string]struct{}, len(ids))
		for _, id := range ids {
			r.hold.predIDs[id] = struct{}{}
		}
	}
	if key == nil {
		return
	}
	r.hold.track, r.hold.predN, r.hold.predDigest, r.hold.predKey = true, pred.GetHolders(), pred.GetHoldersDigest(), key
	r.hold.predUnlisted = -1
	if u := pred.UnlistedFloors; u != nil && *u >= 0 && !math.IsInf(*u, 0) && !math.IsNaN(*u) {
		r.hold.predUnlisted = *u
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

// holderKeyBytes bounds what the digest key adds to a record as JSON:
// `"holdersKey":"<44 base64 characters>",`.
const holderKeyBytes = 64

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
		n := 16 + s.bytes // "holderIds":[],
		if n > budget || !s.listable() {
			continue
		}
		budget -= n
		e.HolderIds = s.ids()
	}
}

// heard counts a first contact in learning that reports a lease, live
// or expired (a client that held one), and ends learning when the
// promised holders have all been heard. A holder whose lease expired
// before the takeover is accounted for as well as one that reports a
// live lease (credited): what it no longer holds needs no credit. One
// told to end within the clock skew of the takeover may still be in use
// but is not credited (the predecessor's ceiling may not cover it): it
// is counted as the client's own until it ends, its floor too (learn,
// creditFloor). A client that reports nothing, or a stranger, makes the
// count or the digest differ.
func (r *resource) heard(now int64, id string) {
	if !r.hold.track {
		return
	}
	r.hold.seenN++
	r.hold.seenDigest += holderHash(r.hold.predKey, id)
	r.endIfAllHeard(now)
}

// endIfAllHeard ends learning once the clients heard are exactly the
// promised holders: no predecessor lease is unaccounted for. Their
// floors are accounted for too (each reported the floor it holds, which
// creditFloor took), so of the predecessor's floors only those of the
// clients outside the promise stay reserved: at most what the record
// says they were (they could get no new floor while it bound).
func (r *resource) endIfAllHeard(now int64) {
	h := &r.hold
	if !h.track || h.seenN != h.predN || h.seenDigest != h.predDigest {
		return
	}
	if r.learning(now) {
		r.learningUntil = now
	}
	if h.predUnlisted >= 0 {
		rem := max(r.floors.pred-r.floors.credited, 0)
		r.floors.pred = r.floors.credited + min(rem, h.predUnlisted)
	}
	h.track = false
}
