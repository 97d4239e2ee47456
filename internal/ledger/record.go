package ledger

import (
	"errors"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// The lease record (a LeaseHorizon, stored by the caller under
// "<node>.leases") is how a coordinator knows which leases it does not
// know about may be outstanding. It is written ahead: before a lease is
// handed out that would expire after the recorded horizon, or that would
// take a share resource's outstanding total above its recorded ceiling, a
// record that covers it must be durable. So at any moment:
//
//   - every lease ever issued for the node expires no later than horizon;
//   - for each resource listed, the unexpired leases sum to at most its
//     ceiling and expire no later than its latest_expiry;
//   - if the record is complete, a share resource not listed has no leases.
//
// A leader that cannot write keeps to what is recorded: grants stay under
// the recorded ceilings and leases end by the recorded horizon (so they
// shorten, then become zero-length, and clients fall back to the safe
// capacity, which counts every client known; see resource.expire).
//
// A new leader (Start) skips learning only when the deployment is
// provably new (PriorNew) or the recorded horizon has passed. A missing
// record of a node that has had one, or a damaged record, means Doorman's
// learning for learning_mode_duration with the capacity assumed taken. A
// record of a term above any the election can have issued is impossible:
// it is reported and treated as damaged, never obeyed.

// PriorKind says what a new leader found in the store.
type PriorKind int

// What a new leader may find.
const (
	// PriorNew: no record, and nothing says the node ever had one or had
	// a leader: a new deployment, no leases can exist.
	PriorNew PriorKind = iota
	// PriorMissing: no record, but the node has had one (a delete or
	// purge marker, other history) or has had a leader: leases may be
	// outstanding.
	PriorMissing
	// PriorDamaged: a record that cannot be decoded.
	PriorDamaged
	// PriorRecord: a decoded record, in Prior.Record.
	PriorRecord
)

// Prior is what a new leader found.
type Prior struct {
	Kind   PriorKind
	Record *allotpb.LeaseHorizon
	// TermBound is the highest term any leader of the node can hold (the
	// election stream's last sequence); 0 if unknown.
	TermBound uint64
	// WrittenAt is when the store took Record (its clock, unix ns; 0
	// unknown), and Previous the revision before it, if kept (nil
	// unknown). They expose records no leader can have written (see
	// Plausible).
	WrittenAt int64
	Previous  *allotpb.LeaseHorizon
}

// Plausible reports why rec cannot have been written by a leader (""
// if it can). A leader writes a horizon no earlier than the time of the
// write, never lowers its horizon within a term, and never writes after a
// leader of a higher term. An edit that claims every lease has expired (a
// past horizon) is so caught at a takeover, as long as the store kept the
// time of the write or the revision before it.
func Plausible(rec *allotpb.LeaseHorizon, writtenAt int64, prev *allotpb.LeaseHorizon, skew time.Duration) string {
	hz := rec.GetHorizon().AsTime().UnixNano()
	slack := int64(skew) + int64(time.Second)
	switch {
	case writtenAt > 0 && hz+slack < writtenAt:
		return "its horizon is before the time it was written"
	case prev == nil || prev.GetHorizon() == nil:
		return ""
	case rec.GetTerm() < prev.GetTerm():
		return "its term is below the term of the record it replaced"
	case rec.GetTerm() == prev.GetTerm() && hz+slack < prev.GetHorizon().AsTime().UnixNano():
		return "its horizon is below the horizon its own term recorded before"
	}
	return ""
}

// ErrNewerLeader means the record was written by a leader of a higher,
// legitimate term: this one must not serve.
var ErrNewerLeader = errors.New("the lease record belongs to a newer leader")

// Verdict classifies a record found in the store while serving.
type Verdict int

// Verdicts.
const (
	// VerdictOurs: written by this leader.
	VerdictOurs Verdict = iota
	// VerdictNewer: a newer leader's: stop serving.
	VerdictNewer
	// VerdictForeign: someone else's (an operator's edit, a stale or
	// impossible term): overwrite it with ours at once.
	VerdictForeign
)

// recordState is the ledger's side of the record.
type recordState struct {
	started     int64 // unix ns: when this leader started
	learningCap int64 // unix ns: predecessor leases may exist until then; 0 none
	until       int64 // unix ns: committed horizon
	retryAt     int64 // unix ns: after a failed write, the next attempt
	complete    bool  // the predecessor's record was complete (or none)
	pred        map[string]*allotpb.ResourceSummary
	// predKey is the key of the predecessor's holder digests (nil: its
	// record has none, so its promises are not kept).
	predKey  *[HolderKeySize]byte
	bytes    int // estimated encoded size of every entry that may be listed
	unlisted int // resources served without a summary (no room)
	// incomplete: a committed record says it is incomplete, so unlisted
	// resources may be granted.
	incomplete bool
	inflight   *Proposal
	rewrite    bool // the stored record is not ours: write ours again
	// lead and reach of a horizon raise asked for while no record could
	// be built (see decide): the next record carries it, as it does
	// resources' early raises (addEarly).
	lead, reach int64
}

// Proposal is a record that must be durable before the grants it covers.
// Store Record (compare-and-set), then call Commit.
type Proposal struct {
	Record  *allotpb.LeaseHorizon
	until   int64
	pending []pendingSummary
}

func (l *Ledger) proposal(now, until int64, pending []pendingSummary) *Proposal {
	pending = l.addEarly(now, until, pending)
	p := &Proposal{Record: l.buildRecord(now, until, pending), until: until, pending: pending}
	l.rec.inflight = p
	return p
}

// pendingSummary is a raise awaiting a successful write.
type pendingSummary struct {
	r       *resource
	ceiling float64
	expiry  int64
	// floorCeiling and floorExpiry bound the resource's floors.
	floorCeiling float64
	floorExpiry  int64
	// early: only the expiries are raised, before any grant needs it (see
	// Ledger.needs); the ceilings stay what they are when it commits.
	early bool
}

// entryBytes bounds the encoded size of resource id's record entry:
// `"<id>":{"ceiling":<float>,"latestExpiry":"<RFC 3339 ns>","holders":<n>,
// "holdersDigest":"<uint64>","holdersUntil":"<RFC 3339 ns>",
// "floorCeiling":<float>,"floorExpiry":"<RFC 3339 ns>"},` in protojson,
// with the id escaped.
func entryBytes(id string) int {
	return 330 + jsonStringBytes(id) // 330: the rest, with a holder promise and floors
}

// jsonStringBytes bounds the bytes of id inside a JSON string.
func jsonStringBytes(id string) int {
	n := 0
	for _, r := range id {
		switch {
		case r < 0x20 || r == utf8.RuneError:
			n += 6
		case r == '"' || r == '\\':
			n += 2
		default:
			n += utf8.RuneLen(r)
		}
	}
	return n
}

// Start resets the ledger for a new term from what the predecessor left,
// and returns the takeover record: the predecessor's horizon and
// summaries under this leader's term, which must be committed before
// serving (its compare-and-set also proves that what was read is the
// latest record). It returns ErrNewerLeader if the record is a newer
// leader's.
func (l *Ledger) Start(now int64, p Prior) (*Proposal, error) {
	l.resources = make(map[string]*resource)
	l.records, l.touched, l.early = 0, nil, nil
	l.rec = recordState{started: now}
	skew := int64(l.cfg.ClockSkew)
	damaged := func() {
		// Assume the worst, bounded: leases of the longest allowed length
		// may just have been issued.
		l.rec.learningCap = now + int64(config.MaxLeaseLength) + skew
		l.rec.until = l.rec.learningCap
	}
	switch p.Kind {
	case PriorNew:
		l.rec.complete = true
	case PriorMissing, PriorDamaged:
		damaged()
	case PriorRecord:
		h := p.Record
		switch {
		case h.GetHorizon() == nil:
			damaged()
		case p.TermBound > 0 && h.GetTerm() > p.TermBound,
			Plausible(h, p.WrittenAt, p.Previous, l.cfg.ClockSkew) != "":
			l.stats.ForgedRecords++
			damaged()
		case h.GetTerm() > l.cfg.Term:
			return nil, ErrNewerLeader
		case h.GetHorizon().AsTime().UnixNano()+skew <= now:
			// Every lease of the predecessor has expired.
			l.rec.complete = true
		default:
			hz := h.GetHorizon().AsTime().UnixNano() + skew
			l.rec.learningCap, l.rec.until = hz, hz
			l.rec.complete = h.GetComplete()
			if k := h.GetHoldersKey(); len(k) == HolderKeySize {
				l.rec.predKey = (*[HolderKeySize]byte)(slices.Clone(k))
			}
			l.rec.pred = make(map[string]*allotpb.ResourceSummary, len(h.GetResources()))
			for id, s := range h.GetResources() {
				if summaryLive(s, now, skew) {
					l.rec.pred[id] = s
					l.rec.bytes += entryBytes(id)
				}
			}
		}
	}
	return l.proposal(now, l.rec.until, nil), nil
}

// Learning reports until when predecessor leases may be outstanding (unix
// ns, 0 none) and whether the predecessor's record was complete.
func (l *Ledger) Learning() (until int64, complete bool) {
	return l.rec.learningCap, l.rec.complete
}

// Judge classifies a record read from the store while serving, by the
// leader of term with serverID. termBound is the highest genuine term (0
// unknown): a higher term than that is impossible, so foreign.
func Judge(h *allotpb.LeaseHorizon, term uint64, serverID string, termBound uint64) Verdict {
	switch {
	case h == nil:
		return VerdictForeign
	case h.GetTerm() == term && h.GetServerId() == serverID:
		return VerdictOurs
	case h.GetTerm() > term && (termBound == 0 || h.GetTerm() <= termBound):
		return VerdictNewer
	}
	return VerdictForeign
}

// Rewrite asks for the record to be written again at the next chance:
// the stored one is not ours (deleted, edited, forged).
func (l *Ledger) Rewrite() { l.rec.rewrite = true }

// Inflight reports whether a proposal awaits Commit.
func (l *Ledger) Inflight() bool { return l.rec.inflight != nil }

// Abandon gives up on writing: whatever is in flight is not waited for,
// and waiting resources are allocated within what is recorded. For a
// coordinator that stops.
func (l *Ledger) Abandon() {
	l.rec.inflight = nil
	l.rec.retryAt = math.MaxInt64
	l.settleHolders(0, false)
	for _, r := range l.touched {
		r.waitSince = 0
	}
}

// Commit reports the outcome of storing p. On success the horizon and the
// raises it carries take effect. On failure nothing is raised, the next
// attempt waits a second, and waiting resources are allocated within what
// is recorded.
func (l *Ledger) Commit(now int64, p *Proposal, err error) {
	if l.rec.inflight == p {
		l.rec.inflight = nil
		l.settleHolders(now, err == nil)
	}
	if err != nil {
		l.stats.RecordErrors++
		l.rec.retryAt = now + int64(time.Second)
		for _, r := range l.touched {
			r.waitSince = 0
		}
		return
	}
	l.stats.RecordWrites++
	l.rec.until = max(l.rec.until, p.until)
	l.rec.incomplete = !p.Record.GetComplete()
	for _, ps := range p.pending {
		if ps.r.unlisted {
			continue
		}
		if ps.early {
			ps.r.ceilingExpiry = max(ps.r.ceilingExpiry, ps.expiry)
			ps.r.floors.ceilingExpiry = max(ps.r.floors.ceilingExpiry, ps.floorExpiry)
			continue
		}
		ps.r.ceiling = ps.ceiling
		ps.r.ceilingExpiry = max(ps.r.ceilingExpiry, ps.expiry)
		ps.r.floors.ceiling = ps.floorCeiling
		ps.r.floors.ceilingExpiry = max(ps.r.floors.ceilingExpiry, ps.floorExpiry)
		ps.r.published = true
	}
}

// Propose decides, for the round's resources, whether their grants need
// a record not yet durable. It returns the record to store (nil if none
// is needed or one is already in flight) and marks the resources that
// wait for it. Grants within the recorded bounds do not wait.
func (l *Ledger) Propose(now int64) *Proposal {
	p, _ := l.decide(now, true, true)
	return p
}

// Defer is Propose for a round that must stay cheap, such as one of
// holders' refreshes while newcomers wait for a record: it decides for
// the round's resources, as Propose does, whether their grants wait for
// a record, but builds none (building one costs every resource of the
// node, and a large newcomer's resources). Unless carried, resources
// that wait since an earlier round and are not asked for in this one are
// left waiting, undecided: settling them (allocating those the last
// write covers) is the newcomers' work, not the holders'. Defer reports
// whether a record is wanted and may be written now: the caller then
// calls Propose, in a later round, to build it.
func (l *Ledger) Defer(now int64, carried bool) bool {
	_, want := l.decide(now, carried, false)
	return want
}

// decide is Propose (build) or Defer (not build); carried says whether
// resources waiting since an earlier round and not asked for in this one
// are decided too.
func (l *Ledger) decide(now int64, carried, build bool) (*Proposal, bool) {
	// The horizon covers leases and the floors that follow them: span is
	// the longest of either among the round's resources.
	var span int64
	lead, reach := l.rec.lead, l.rec.reach
	for _, r := range l.touched {
		if len(r.batch) > 0 && (carried || r.round == l.round) {
			span = max(span, r.span())
			ld, rc := leadOf(r.span(), r)
			lead, reach = max(lead, ld), max(reach, rc)
		}
	}
	until := l.rec.until
	needHorizon := span > 0 && now+span > until
	// Extend early, so a write that is slow or fails has time to land or
	// be retried before leases and floors shorten (see leadOf).
	extend := needHorizon || lead > 0 && now+lead > until || l.rec.rewrite
	if extend {
		until = max(until, now+reach)
	}
	canWrite := l.rec.inflight == nil && now >= l.rec.retryAt
	var pending []pendingSummary
	for _, r := range l.touched {
		if !carried && r.round != l.round {
			continue // keeps waiting
		}
		if len(r.batch) == 0 {
			r.waitSince = 0
			continue
		}
		if r.up.child && !r.up.known {
			// A child's first request for a resource waits for the
			// parent's first answer (at most MaxRecordWait), so it is
			// served within about one round trip to the parent.
			switch {
			case r.waitSince == 0:
				r.waitSince = now
				l.stats.Waits++
				continue
			case now-r.waitSince < int64(l.cfg.MaxRecordWait):
				continue
			}
		}
		ps, raise, early := l.needs(now, r, until)
		need := raise || now+r.span() > l.rec.until
		switch {
		case !need:
			r.waitSince = 0
			if early && !r.early {
				r.early = true
				l.early = append(l.early, r)
			}
			continue
		case r.waitSince != 0 && now-r.waitSince >= int64(l.cfg.MaxRecordWait):
			// Waited long enough: grant within what is recorded.
			r.waitSince = 0
		case canWrite || l.rec.inflight != nil:
			if r.waitSince == 0 {
				r.waitSince = now
				l.stats.Waits++
			}
		default:
			r.waitSince = 0 // writes are backing off: grant within the record
		}
		if raise {
			pending = append(pending, ps)
		}
	}
	if extend && (!canWrite || !build) {
		// Kept for the next record, which may be built as soon as the
		// write in flight lands, when no round of the resources asks: a
		// raise asked for only by their next rounds, each finding a write
		// out, may come too late under writes queued back to back.
		l.rec.lead, l.rec.reach = lead, reach
	}
	if !canWrite || !extend && len(pending) == 0 && len(l.early) == 0 {
		return nil, false
	}
	if !build {
		return nil, true
	}
	l.rec.rewrite = false
	l.rec.lead, l.rec.reach = 0, 0
	return l.proposal(now, until, pending), true
}

// needs works out the raise r's round needs: listing it, covering its
// leases' expiry, raising its ceiling to what the round could grant. A
// raise makes the round's grants wait for the record. early says the
// recorded expiries cover the round but will not for long (see leadOf):
// p raises them, and the next record should carry that, so that a later
// round finds them covered and does not wait for a write, which may be
// queued behind newcomers' then.
func (l *Ledger) needs(now int64, r *resource, until int64) (p pendingSummary, raise, early bool) {
	ll := int64(r.tmpl.LeaseLength)
	p = pendingSummary{r: r, ceiling: r.ceiling, expiry: r.ceilingExpiry, floorCeiling: r.floors.ceiling, floorExpiry: r.floors.ceilingExpiry}
	if r.unlisted {
		// Nothing to list; a committed record must say it is incomplete.
		return p, !l.rec.incomplete, false
	}
	lead, reach := leadOf(ll, r)
	e := max(r.ceilingExpiry, min(now+reach, max(until, now+ll)))
	raise = !r.published || now+ll > r.ceilingExpiry
	if raise || now+lead > r.ceilingExpiry && e > r.ceilingExpiry {
		p.expiry, early = e, !raise
	}
	if r.shared() {
		fr, fe := l.needsFloors(now, r, until, &p)
		raise, early = raise || fr, early || fe
	}
	if r.shared() && r.needsHolders(now) {
		raise = true // a new client waits for a record that lists it
	}
	switch {
	case r.shared():
		capacity := r.capacity(now)
		b := r.bound(now)
		inc := 0.0
		for _, i := range r.batch {
			inc += max(min(r.clients.at(i).wants, capacity)-r.clients.at(i).has, 0)
		}
		if want := min(b+inc, max(capacity, b)); want > r.ceiling*(1+1e-12) || !r.published {
			// Headroom only where there is demand: a resource nobody wants
			// any of keeps a zero ceiling and stays out of the record.
			hr := 0.0
			if want > 0 {
				hr = l.headroom(r, now)
			}
			p.ceiling = max(b, min(capacity, want+hr), r.ceilingOrZero())
			raise = true
		}
	case !math.IsInf(r.ceiling, 1) || !r.published:
		// Capacity is per client: no bound. Also when the template just
		// changed from a share algorithm, whose finite ceiling no longer
		// bounds what this round may grant.
		p.ceiling = math.Inf(1)
		raise = true
	}
	return p, raise, early && !raise
}

// addEarly adds to pending the early raises of expiries (see needs) of
// the resources that wanted one since the last record and are not in
// pending already.
func (l *Ledger) addEarly(now, until int64, pending []pendingSummary) []pendingSummary {
	if len(l.early) == 0 {
		return pending
	}
	for _, ps := range pending {
		ps.r.early = false
	}
	for _, r := range l.early {
		if !r.early || l.resources[r.id] != r {
			continue // in pending, or forgotten
		}
		r.early = false
		if ps, raise, early := l.needs(now, r, until); early && !raise {
			ps.early = true
			ps.ceiling, ps.floorCeiling = r.ceiling, r.floors.ceiling
			pending = append(pending, ps)
		}
	}
	clear(l.early)
	l.early = l.early[:0]
	return pending
}

// buildRecord returns the record with horizon until and every resource's
// summary, pending raises applied.
func (l *Ledger) buildRecord(now, until int64, pending []pendingSummary) *allotpb.LeaseHorizon {
	rec := &allotpb.LeaseHorizon{
		Node:     l.cfg.Node,
		Term:     l.cfg.Term,
		ServerId: l.cfg.ServerID,
		// Never before now: a successor takes a horizon before the time of
		// the write for an edit (see Plausible).
		Horizon:   timestamppb.New(time.Unix(0, max(until, now))),
		Resources: make(map[string]*allotpb.ResourceSummary, len(l.resources)+len(l.rec.pred)),
	}
	if l.cfg.Partitions > 1 {
		rec.Partitions = uint32(l.cfg.Partitions)
	}
	// The record may claim completeness only if no unknown predecessor
	// leases can be outstanding.
	rec.Complete = (l.rec.complete || now >= l.rec.learningCap) && l.rec.unlisted == 0
	skew := int64(l.cfg.ClockSkew)
	for id, s := range l.rec.pred {
		if summaryLive(s, now, skew) {
			// Without the predecessor's holder promise: this leader does
			// not keep it.
			rec.Resources[id] = summaryOf(s.GetCeiling(), s.GetLatestExpiry().AsTime().UnixNano(),
				s.GetFloorCeiling(), s.GetFloorExpiry().AsTime().UnixNano())
		}
	}
	// A zero ceiling means no leases and no floors: a complete record need
	// not list it (and an incomplete one makes a successor assume the
	// worst anyway).
	for id, r := range l.resources {
		if r.published && r.ceiling != 0 && !r.unlisted {
			rec.Resources[id] = summaryOf(r.ceiling, r.summaryExpiry(), r.floors.ceiling, r.floorSummaryExpiry())
		}
	}
	for _, p := range pending {
		if p.r.unlisted {
			continue
		}
		if p.ceiling == 0 {
			delete(rec.Resources, p.r.id)
			continue
		}
		rec.Resources[p.r.id] = summaryOf(p.ceiling, max(p.expiry, p.r.summaryExpiry()), p.floorCeiling, max(p.floorExpiry, p.r.floorSummaryExpiry()))
	}
	// Holder promises of the listed resources; from now until the write's
	// outcome, grants keep to them as well (see holders.go).
	snaps := make(map[string]holderSnapshot)
	for id, r := range l.resources {
		snap := holderSnapshot{}
		if e, listed := rec.Resources[id]; listed {
			snap = r.snapshotHolders(now)
			if snap.until > 0 {
				// The promise lasts as long as a successor may learn: it
				// learns until the latest expiry plus the clock skew, and
				// heeds the promise only if it took over a clock skew
				// before its end. So a successor that takes over at any
				// time the leases the record covers may still be out can
				// hear every holder and end learning, however late the
				// takeover (a crash just before a write, a restart after
				// every lease lapsed). Up to the latest expiry only, one
				// taking over within a clock skew of it either way learned
				// the whole time, keeping the ceiling back. The leader loses
				// nothing by promising longer: no grant outlasts the
				// latest expiry without a new record, which lists its
				// client.
				snap.until = max(snap.until, e.GetLatestExpiry().AsTime().UnixNano()+2*skew)
			}
			snap.summary(e)
			snaps[id] = snap
		} else {
			r.hold.forget()
		}
		r.hold.inflight, r.hold.pseq, r.hold.pendUntil = true, snap.seq, snap.until
	}
	// The key of the digests goes with them: a successor recomputes them
	// under it.
	budget := l.cfg.MaxRecordBytes - l.rec.bytes - 4096
	for _, s := range snaps {
		if s.until > 0 {
			rec.HoldersKey = slices.Clone(l.cfg.HolderKey[:])
			budget -= holderKeyBytes
			break
		}
	}
	// The ids go in only while the record stays within its limit: the
	// entries' estimate, the key, what the ids take, and a margin for
	// the rest.
	listHolderIDs(rec.Resources, snaps, min(maxHolderIDBytes, budget))
	return rec
}

// settleHolders applies the outcome of a write to the holder promises. A
// failed write may still have been stored (a time-out), so grants then
// keep to both promises until the later one ends.
func (l *Ledger) settleHolders(now int64, ok bool) {
	for _, r := range l.resources {
		h := &r.hold
		if !h.inflight {
			continue
		}
		switch {
		case ok || h.until <= now:
			h.cseq, h.until = h.pseq, h.pendUntil
		case h.pendUntil > now:
			// Grants keep to both promises: the clients in both are those
			// whose run began by the older one (see holders).
			h.until = max(h.until, h.pendUntil)
		}
		h.inflight, h.pseq, h.pendUntil = false, 0, 0
	}
}

// summaryOf is the record entry of a resource: its ceiling until expiry,
// and the floors' ceiling until floorExpiry (none when 0).
func summaryOf(ceiling float64, expiry int64, floorCeiling float64, floorExpiry int64) *allotpb.ResourceSummary {
	s := &allotpb.ResourceSummary{Ceiling: ceiling, LatestExpiry: timestamppb.New(time.Unix(0, expiry))}
	if floorExpiry > 0 && !math.IsInf(floorCeiling, 0) {
		s.FloorCeiling, s.FloorExpiry = floorCeiling, timestamppb.New(time.Unix(0, floorExpiry))
	}
	return s
}

// summaryLive reports whether a record entry may still bound something
// at now: a lease, or a floor.
func summaryLive(s *allotpb.ResourceSummary, now, skew int64) bool {
	return s.GetLatestExpiry() != nil && s.GetLatestExpiry().AsTime().UnixNano()+skew > now ||
		s.GetFloorExpiry() != nil && s.GetFloorExpiry().AsTime().UnixNano()+skew > now
}

// leadOf says how far ahead a recorded bound on what r hands out for
// span (its leases, its floors, or both: the horizon) is kept. When less
// than lead is left, the next write raises it to reach ahead.
//
// The raise is asked for by a round of the resource, at most a refresh
// interval after less than lead is left, and must land before less than
// span is left (or within MaxRecordWait after), else what is handed out
// is cut short to the recorded bound. So lead is span plus a lease
// length and the refresh interval (at least half the span): a raise
// that lands within a lease length of the round that asked for it cuts
// nothing, even queued behind another write as slow, each taking half a
// lease length (the writer's time-out, 2 s, for leases of 4 s). reach is
// a lease length beyond lead (at least twice the span), so a steadily
// refreshed resource is written about once per lease length; a
// successor finds its latest expiry at most three lease lengths plus a
// refresh interval ahead (it was two lease lengths).
func leadOf(span int64, r *resource) (lead, reach int64) {
	ll := int64(r.tmpl.LeaseLength)
	lead = span + max(span/2, ll+int64(r.tmpl.RefreshInterval))
	return lead, max(2*span, lead+ll)
}

// span is how long what the resource hands out may last: its leases, and
// the floors that follow them.
func (r *resource) span() int64 {
	return max(int64(r.tmpl.LeaseLength), int64(floorLeaseOf(r)))
}

// needsFloors works out the raise of r's floor bounds its round needs:
// covering the floors' end, and their sum with what the round may grant
// (at most the policy's floor for each client of the round); early as
// for needs.
func (l *Ledger) needsFloors(now int64, r *resource, until int64, p *pendingSummary) (raise, early bool) {
	fl := int64(floorLeaseOf(r))
	if fl == 0 {
		return false, false
	}
	lead, reach := leadOf(fl, r)
	e := max(r.floors.ceilingExpiry, min(now+reach, max(until, now+fl)))
	switch {
	case !r.published || now+fl > r.floors.ceilingExpiry:
		p.floorExpiry = e
		raise = true
	case now+lead > r.floors.ceilingExpiry && e > r.floors.ceilingExpiry:
		p.floorExpiry = e
		early = true
	}
	fb, fcap, per := r.floorBound(now), r.floorCap(now), r.floorPer(now)
	inc := 0.0
	for _, i := range r.batch {
		c := r.clients.at(i)
		inc += max(min(per*c.weight, c.wants, fcap)-c.floorExposure(now), 0)
	}
	if want := min(fb+inc, max(fcap, fb)); want > r.floors.ceiling*(1+1e-12) || !r.published {
		hr := 0.0
		if want > 0 {
			hr = floorHeadroom * fcap
		}
		p.floorCeiling = max(fb, min(fcap, want+hr), floorCeilingOrZero(r.floors.ceiling))
		raise = true
	}
	return raise, early
}

func floorCeilingOrZero(c float64) float64 {
	if math.IsInf(c, 1) {
		return 0
	}
	return c
}

// floorSummaryExpiry is the floor expiry to publish for r: its own bound
// and the predecessor's.
func (r *resource) floorSummaryExpiry() int64 {
	e := r.floors.ceilingExpiry
	if e == math.MaxInt64 {
		e = 0
	}
	if r.floors.predEnd > 0 {
		e = max(e, r.floors.predEnd-r.skew)
	}
	return e
}

// summaryExpiry is the latest expiry to publish for r: its own bound and,
// while learning, the predecessor's.
func (r *resource) summaryExpiry() int64 {
	e := r.ceilingExpiry
	if e == math.MaxInt64 {
		e = 0
	}
	return max(e, r.predExpiry)
}

func (r *resource) ceilingOrZero() float64 {
	if math.IsInf(r.ceiling, 1) {
		return 0
	}
	return r.ceiling
}

// headroom is a fraction of the capacity the resource divides now (on a
// child, its lease): a successor holds back what the recorded ceiling
// leaves above the truth until learning ends, so it must stay small
// against what the node actually has.
func (l *Ledger) headroom(r *resource, now int64) float64 {
	return l.cfg.CeilingHeadroom * r.capacity(now)
}

// shrink lowers ceilings well above what is outstanding and drops
// expired summaries, so that a successor can hand out more at once.
// Lowered ceilings bind at once, before the write (so a failed write never
// leaves a record below the truth). It returns the record to write, if
// anything changed and a write may start.
func (l *Ledger) shrink(now int64) *Proposal {
	changed := l.rec.rewrite
	skew := int64(l.cfg.ClockSkew)
	for id, s := range l.rec.pred {
		if !summaryLive(s, now, skew) {
			delete(l.rec.pred, id)
			l.rec.bytes -= entryBytes(id)
			changed = true
		}
	}
	for _, r := range l.resources {
		if !r.published || !r.shared() || r.unlisted {
			continue
		}
		b, h := r.bound(now), l.headroom(r, now)
		if r.ceiling > b+2*h {
			r.ceiling = b + h
			changed = true
		}
		fb, fh := r.floorBound(now), floorHeadroom*r.floorCap(now)
		if r.floors.ceiling > fb+2*fh {
			r.floors.ceiling = fb + fh
			changed = true
		}
	}
	if !changed || l.rec.inflight != nil || now < l.rec.retryAt {
		return nil
	}
	l.rec.rewrite = false
	return l.proposal(now, l.rec.until, nil)
}

// newResource creates the state of a resource and decides on learning
// mode from the predecessor's record (see resource.learn).
func (l *Ledger) newResource(now int64, id string, t *config.Template, gen uint64) *resource {
	r := newResource(id, t, gen)
	r.skew = int64(l.cfg.ClockSkew)
	r.up.child = l.cfg.Child
	r.floors.sink = &l.sink
	r.ceiling, r.ceilingExpiry = 0, 0 // nothing published for it yet
	r.floors.ceiling, r.floors.ceilingExpiry = 0, 0
	r.learnStart = l.rec.started
	r.hold.key = l.holderKey()
	pred, listed := l.rec.pred[id]
	if listed {
		// Carried over into our record at takeover: it binds us too.
		delete(l.rec.pred, id)
		l.rec.bytes -= entryBytes(id)
		r.published = true
		r.ceiling = pred.GetCeiling()
		r.predExpiry = pred.GetLatestExpiry().AsTime().UnixNano()
		r.ceilingExpiry = r.predExpiry
		if fe := pred.GetFloorExpiry(); fe != nil && pred.GetFloorCeiling() >= 0 && !math.IsNaN(pred.GetFloorCeiling()) {
			// The predecessor's floors: held back, less what clients
			// report, until they end (they outlast learning).
			r.floors.ceiling, r.floors.ceilingExpiry = pred.GetFloorCeiling(), fe.AsTime().UnixNano()
			r.floors.pred, r.floors.predEnd = pred.GetFloorCeiling(), r.floors.ceilingExpiry+r.skew
		}
	}
	// No predecessor leases can exist, or the operator disabled learning.
	if l.rec.learningCap == 0 || now >= l.rec.learningCap || t.LearningModeDuration <= 0 {
		return r
	}
	// The predecessor's bound is worked out whatever this template's
	// algorithm, so that a template change during learning (STATIC to
	// FAIR_SHARE, say) still counts the predecessor's leases.
	switch {
	case listed && !math.IsInf(pred.GetCeiling(), 0) && !math.IsNaN(pred.GetCeiling()) && pred.GetCeiling() >= 0:
		r.predCeiling, r.predBounded = pred.GetCeiling(), true
		// Learn until the predecessor's leases for it have expired. The
		// current template's lease length does not shorten this: the
		// predecessor may have issued longer leases before a change.
		r.learningUntil = r.predExpiry + r.skew
		// Or until every holder it promised has been heard.
		r.trackPredecessor(pred, l.rec.predKey)
		r.endIfAllHeard(now)
	case listed:
		// Not bounded by the predecessor (it used a per-client algorithm,
		// so any number of clients may hold up to the capacity each).
		r.predCeiling = math.Inf(1)
		r.learningUntil = r.predExpiry + r.skew
	case l.rec.complete:
		// A complete record without it: no leases outstanding.
	default:
		// Not in the record (an incomplete record, or none where one was
		// expected): Doorman's rule, learn for learning_mode_duration and
		// assume the predecessor leased out up to the capacity. Its
		// floors are unknown too: up to the capacity, for as long as a
		// floor of this template lasts.
		r.predCeiling = t.Capacity
		r.learningUntil = min(l.rec.learningCap, l.rec.started+int64(t.LearningModeDuration))
		if fl := int64(floorLeaseOf(r)); fl > 0 {
			r.floors.pred = t.Capacity
			r.floors.predEnd = min(l.rec.learningCap, l.rec.started+fl+r.skew)
		}
	}
	return r
}
