// Package ledger keeps the lease state of one coordinator node: each
// resource's clients and their leases, the allocation rounds' pure half,
// learning after a takeover, and the write-ahead lease record.
//
// It does no I/O and reads no clock: the caller passes the time, stores
// the record the ledger proposes, and reports the outcome. A round is
//
//	l.Get / l.Release for each request    apply the batch
//	p := l.Propose(now)                   the record that must be durable first (or nil)
//	l.Allocate(now)                       grants within what is recorded
//	l.Ready / l.Lease for each request    answer what was allocated
//	l.EndRound()
//
// and, when the store has answered, l.Commit(now, p, err). A resource
// whose grants need a record not yet durable waits (its requests stay
// unanswered, see Ready) until the write commits, fails, or
// Config.MaxRecordWait passes; then it is allocated within the recorded
// bounds. Grants within the recorded bounds never wait for a write.
//
// A round costs O(k log n) for the k clients that asked, whatever the n
// clients held: what all clients may hold is kept in running sums
// (sums.go), the shares in a level.State per resource (levels.go), and
// when owed capacity comes back in rings of due times (nextfree.go).
// Every change of a client record goes through recount, and the tests
// compare all of it with sums and shares worked out from scratch.
//
// One goroutine owns a Ledger.
package ledger

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// Defaults for Config.
const (
	DefaultClockSkew       = 2 * time.Second
	DefaultCeilingHeadroom = 0.1
	DefaultMaxResources    = 100_000
	DefaultMaxClients      = 2_000_000
	// DefaultMaxRecordBytes bounds the encoded lease record, well below
	// NATS's default 1 MiB maximum payload.
	DefaultMaxRecordBytes = 512 << 10
	DefaultMinRefresh     = 50 * time.Millisecond
	DefaultMaxRecordWait  = 500 * time.Millisecond
)

// Error codes of refused resources, as in the wire protocol.
const (
	CodeNoTemplate = 404
	CodeTooMany    = 429
)

// Config configures a Ledger. Zero values take the defaults.
type Config struct {
	Node     string
	ServerID string
	// Term is written into the record; a record of a higher term is a
	// newer leader's.
	Term uint64
	// Partitions is the node's number of lease partitions, written into
	// the record when above 1: which resources a record can speak for
	// depends on it.
	Partitions int
	// ClockSkew is the most the clocks of the node's replicas differ by;
	// a predecessor's times are trusted only with this margin. Negative
	// means none.
	ClockSkew time.Duration
	// CeilingHeadroom: how far above the outstanding total, as a fraction
	// of capacity, a raised ceiling is set, so the record is not rewritten
	// on every grant.
	CeilingHeadroom float64
	// MaxResources bounds the resources kept; a new one past it is
	// refused with CodeTooMany.
	MaxResources int
	// MaxClients bounds the client records kept (one per client and
	// resource, lapsed ones included); a new one past it is refused with
	// CodeTooMany. Default DefaultMaxClients: a million clients on one
	// resource with room to spare, some 300 bytes each.
	MaxClients int
	// MaxRecordBytes bounds the encoded record: a resource whose summary
	// would not fit is refused with CodeTooMany, so the record stays
	// complete whatever clients send.
	MaxRecordBytes int
	// MinRefresh is the shortest refresh interval handed out.
	MinRefresh time.Duration
	// MaxRecordWait is how long a resource's grants wait for a record
	// write before they are made within the recorded bounds.
	MaxRecordWait time.Duration
	// Child: the node has a parent; each resource's capacity is its
	// lease from the parent (SetUpstream), not the template's.
	Child bool
	// TenantMaxResources and TenantMaxClients bound, per tenant, the
	// resources it has clients on and its client records, whatever the
	// templates say: a share of MaxResources and MaxClients each, so that
	// one tenant cannot fill the node's limits. Default a tenth of them.
	TenantMaxResources int
	TenantMaxClients   int
	// ChildMaxClients bounds the number of clients a child node's band
	// may claim to stand for (its weight in the share algorithms), unless
	// ChildClients names the child: a child that claims more is counted
	// at the bound (STATS child_capped). A compromised child level so
	// cannot take a parent's capacity by claiming a huge number of
	// clients. Default DefaultChildMaxClients.
	ChildMaxClients int64
	ChildClients    map[string]int64
	// HolderKey keys the holder digests of this leader's records (see
	// holders.go): draw it at random (crypto/rand) for each term. It goes
	// into the record, which only the coordinators may read: whoever
	// knows it can make up client ids that match a digest. Zero: the
	// ledger records no holder promises (a successor then learns for the
	// whole lease length after a takeover).
	HolderKey [HolderKeySize]byte
}

// DefaultChildMaxClients is the default Config.ChildMaxClients.
const DefaultChildMaxClients = 10_000

func (c *Config) fill() {
	switch {
	case c.ClockSkew == 0:
		c.ClockSkew = DefaultClockSkew
	case c.ClockSkew < 0:
		c.ClockSkew = 0
	}
	if c.CeilingHeadroom <= 0 {
		c.CeilingHeadroom = DefaultCeilingHeadroom
	}
	if c.MaxResources <= 0 {
		c.MaxResources = DefaultMaxResources
	}
	if c.MaxClients <= 0 {
		c.MaxClients = DefaultMaxClients
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.MinRefresh <= 0 {
		c.MinRefresh = DefaultMinRefresh
	}
	if c.MaxRecordWait <= 0 {
		c.MaxRecordWait = DefaultMaxRecordWait
	}
	if c.TenantMaxResources <= 0 {
		c.TenantMaxResources = max(c.MaxResources/10, 1)
	}
	if c.TenantMaxClients <= 0 {
		c.TenantMaxClients = max(c.MaxClients/10, 1)
	}
	if c.ChildMaxClients <= 0 {
		c.ChildMaxClients = DefaultChildMaxClients
	}
}

// Ledger is the lease state of one node. Create it with New, then Start.
type Ledger struct {
	cfg       Config
	resources map[string]*resource
	records   int // client records over all resources
	rec       recordState
	touched   []*resource
	// round numbers the rounds (EndRound counts them), so that Defer can
	// tell the resources asked for in this one from those still waiting
	// since an earlier one.
	round uint64
	// early are the resources whose recorded expiries the next record
	// should raise before their grants need it (see needs).
	early   []*resource
	upTerms map[UpstreamSource]uint64 // highest parent term seen, per source (child nodes)
	// tenantRes counts, per tenant, the resources it has clients on, and
	// tenantRecs its client records.
	tenantRes  map[string]int
	tenantRecs map[string]int
	stats      Stats
	// cut is what the record cut off leases since TakeCut, cutTaken the
	// leases cut before.
	cut      Cut
	cutTaken uint64
	// sink keeps events for the caller to log (Events).
	sink eventSink
	// GetAs's working lists, reused from call to call: a ledger serves
	// one caller at a time, and GetAs runs for every request.
	getTmpls []*config.Template
	getAt    []int32
	// Prefetch's working list, and where it keeps what it read so that
	// the reads are not compiled away.
	prefetch     []prefetchItem
	prefetchSink uint64
	prefetchFrom int // prefetchFrom; tests read ahead from fewer
}

// Stats count what the ledger did.
type Stats struct {
	RecordWrites  uint64 // records committed
	RecordErrors  uint64 // record writes that failed
	ForgedRecords uint64 // records ignored as impossible (term above the election's)
	Waits         uint64 // resource rounds that waited for a record write
	// PriorityCapped counts requests (and child bands) served at their
	// template's max_priority instead of the higher one they asked for.
	PriorityCapped uint64
	// TenantCapped counts resources of requests refused for a tenant cap
	// (tenants.max_clients or tenants.max_resources, or the node's caps
	// per tenant).
	TenantCapped uint64
	// ChildCapped counts child nodes' bands that claimed more clients
	// than ChildMaxClients (or their ChildClients) allow.
	ChildCapped uint64
	// OverClaims counts clients that, at first contact in learning mode,
	// reported holding more than the predecessor's record allows (its
	// ceiling for the resource, or the capacity); the report was capped.
	OverClaims uint64
	// Unheard counts claimants whose lease ended unrefreshed while they
	// had a floor, and Forgotten child nodes whose record ended (their
	// floor with it): see Events.
	Unheard   uint64
	Forgotten uint64
	// CutLeases counts leases that ended before a full lease length
	// because the record did not cover one (its latest expiry for the
	// resource, or its horizon, had not been raised in time): cut short,
	// or zero-length once the recorded expiry has passed. See TakeCut.
	CutLeases uint64
	Resources int
	Clients   int // client records
}

// New returns an empty ledger; Start it before use.
func New(cfg Config) *Ledger {
	cfg.fill()
	return &Ledger{cfg: cfg, resources: make(map[string]*resource), tenantRes: make(map[string]int), tenantRecs: make(map[string]int),
		prefetchFrom: prefetchFrom}
}

// holderKey returns the key of this leader's holder digests, nil if none.
func (l *Ledger) holderKey() *[HolderKeySize]byte {
	if l.cfg.HolderKey == [HolderKeySize]byte{} {
		return nil
	}
	return &l.cfg.HolderKey
}

// Stats returns the counters.
func (l *Ledger) Stats() Stats {
	s := l.stats
	s.Resources, s.Clients = len(l.resources), l.records
	s.Unheard, s.Forgotten = l.sink.unheard, l.sink.forgotten
	s.CutLeases = l.cutTaken + l.cut.Leases
	return s
}

// Slot is where one resource of a GetCapacity request stands: a client
// record to answer from, or an error of its own.
type Slot struct {
	r      *resource
	client string
	at     int32 // where the record was when the request was applied (see lookupAt)
	// Code and Err are set when the resource is refused.
	Code int32
	Err  string
}

// ErrNothingServed is wrapped by Get's error when no resource of the
// request can be served; the first slot's code and text say why.
var ErrNothingServed = errors.New("no resource of the request can be served")

// Get applies a GetCapacity request (already validated) and returns one
// slot per resource. A resource that cannot be served (no template, a
// limit reached) gets an error in its slot and changes nothing; the others
// are applied. If none can be, the returned error says so and nothing is
// applied. The request comes from a plain subject (see GetAs).
func (l *Ledger) Get(now int64, set *config.Set, req *allotpb.GetCapacityRequest) ([]Slot, error) {
	return l.GetAs(now, set, Claimant{}, req)
}

// GetAs is Get for a request sent by who: its client id names a record of
// who's own.
func (l *Ledger) GetAs(now int64, set *config.Set, who Claimant, req *allotpb.GetCapacityRequest) ([]Slot, error) {
	return l.GetInto(nil, now, set, who, req)
}

// GetInto is GetAs returning its slots in dst's array if it is large
// enough, so that a caller answering many requests can reuse one slice.
func (l *Ledger) GetInto(dst []Slot, now int64, set *config.Set, who Claimant, req *allotpb.GetCapacityRequest) ([]Slot, error) {
	res := req.GetResource()
	// Every element of tmpls is set below, and of at where tmpls is set.
	tmpls := slices.Grow(l.getTmpls[:0], len(res))[:len(res)]
	at := slices.Grow(l.getAt[:0], len(res))[:len(res)] // where each resource keeps id's record (see lookupAt)
	l.getTmpls, l.getAt = tmpls, at
	slots := slices.Grow(dst[:0], len(res))[:len(res)]
	clear(slots)
	id := who.key(req.GetClientId())
	served, addRes, addClients, addTenantRes := 0, 0, 0, 0
	for k, rr := range res {
		var r *resource
		if tmpls[k], r, slots[k].Code, slots[k].Err = l.resolve(set, rr.GetResourceId(), &addRes); tmpls[k] == nil {
			continue
		}
		i, known := r.lookup(id)
		at[k] = -1
		if known {
			at[k] = i
		}
		if !known {
			if l.records+addClients >= l.cfg.MaxClients {
				tmpls[k] = nil
				slots[k] = Slot{Code: CodeTooMany, Err: fmt.Sprintf("this node keeps %d client records (one per client and resource) and the limit is %d (--max-clients)", l.records+addClients, l.cfg.MaxClients)}
				continue
			}
			if why := l.tenantCap(tmpls[k], r, rr.GetResourceId(), who, &addTenantRes, addClients); why != "" {
				tmpls[k] = nil
				slots[k] = Slot{Code: CodeTooMany, Err: why}
				l.stats.TenantCapped++
				continue
			}
			addClients++
		}
		served++
	}
	if served == 0 {
		return slots, fmt.Errorf("%w: %s", ErrNothingServed, slots[0].Err)
	}
	for k, rr := range res {
		if tmpls[k] == nil {
			continue
		}
		r := l.resourceFor(now, rr.GetResourceId(), tmpls[k], set.Generation)
		l.touch(now, r)
		var hasExpiry int64
		if e := rr.GetHas().GetExpiryTime(); e != nil {
			hasExpiry = e.AsTime().UnixNano()
		}
		rep := holding{capacity: rr.GetHas().GetCapacity(), expiry: hasExpiry, floor: rr.GetSafe().GetCapacity(), any: rr.GetHas() != nil}
		if e := rr.GetSafe().GetExpiryTime(); e != nil {
			rep.floorEnd = e.AsTime().UnixNano()
		}
		before := r.records()
		i := r.upsertAt(at[k], id, rr.GetWants(), 1, l.priority(tmpls[k], who, rr.GetPriority()), rep, now)
		l.records += r.records() - before
		r.creditFloor(i, now)
		slots[k] = Slot{r: r, client: id, at: i}
	}
	return slots, nil
}

// resolve finds the template serving resource rid and its state (nil if
// new), or says why it cannot be served: no template (or refused), or the
// node's resource limit, counting addRes resources the request adds
// already (and one more for rid if it is new).
func (l *Ledger) resolve(set *config.Set, rid string, addRes *int) (*config.Template, *resource, int32, string) {
	r := l.resources[rid]
	if r != nil && r.gen == set.Generation {
		return r.tmpl, r, 0, ""
	}
	t := set.Match(rid)
	if t == nil {
		if why := set.Refused(rid); why != "" {
			return nil, nil, CodeNoTemplate, fmt.Sprintf("resource %q is refused: %s", rid, why)
		}
		return nil, nil, CodeNoTemplate, fmt.Sprintf("resource %q matches no template and unmatched resources are rejected; add a template with 'allot config put'", rid)
	}
	if r == nil {
		if len(l.resources)+*addRes >= l.cfg.MaxResources {
			return nil, nil, CodeTooMany, fmt.Sprintf("this node keeps state for %d resources and the limit is %d (--max-resources); %q would be a new one", len(l.resources)+*addRes, l.cfg.MaxResources, rid)
		}
		*addRes++
	}
	return t, r, 0, ""
}

// Release ends the named client's leases on the named resources at once
// and returns how many it held. The request comes from a plain subject
// (see ReleaseAs).
func (l *Ledger) Release(now int64, client string, resources []string) int32 {
	return l.ReleaseAs(now, Claimant{}, client, resources)
}

// ReleaseAs is Release for a request sent by who: it ends only who's own
// client's leases, whoever else uses the same client id.
func (l *Ledger) ReleaseAs(now int64, who Claimant, client string, resources []string) int32 {
	client = who.key(client)
	var n int32
	for _, id := range resources {
		if r := l.resources[id]; r != nil && r.markReleased(client, now) {
			l.touch(now, r)
			n++
		}
	}
	return n
}

// touch adds r to the round. Expired leases are dropped first, unless
// the resource still has requests waiting from an earlier round (their
// batch refers to client indices).
func (l *Ledger) touch(now int64, r *resource) {
	r.round = l.round
	if r.inBatch {
		return
	}
	r.inBatch = true
	if len(r.batch) == 0 {
		before := r.records()
		r.expire(now)
		l.records += r.records() - before
	}
	l.touched = append(l.touched, r)
}

// resourceFor returns the state of resource id, creating it or updating
// its template as configuration changes.
func (l *Ledger) resourceFor(now int64, id string, t *config.Template, gen uint64) *resource {
	r := l.resources[id]
	if r == nil {
		r = l.newResource(now, id, t, gen)
		r.tenants.resources, r.tenants.records = l.tenantRes, l.tenantRecs
		l.resources[id] = r
		if eb := entryBytes(id); l.rec.bytes+eb <= l.cfg.MaxRecordBytes {
			l.rec.bytes += eb
		} else {
			// The record has no room for its summary: serve it unlisted,
			// bounded only by the horizon, in a record marked incomplete
			// (a successor then learns for it as Doorman did). So the
			// record stays bounded and nobody is refused for it.
			r.unlisted = true
			r.ceiling, r.ceilingExpiry = math.Inf(1), math.MaxInt64
			r.floors.ceiling, r.floors.ceilingExpiry = math.Inf(1), math.MaxInt64
			l.rec.unlisted++
		}
		return r
	}
	r.setTemplate(t, gen)
	return r
}

// Allocate runs the algorithm of every resource of the round that is not
// waiting for the record, and settles its clients.
func (l *Ledger) Allocate(now int64) {
	p := roundParams{now: now, horizon: l.rec.until, minFresh: l.cfg.MinRefresh, stats: &l.stats, cut: &l.cut}
	for _, r := range l.touched {
		if r.waitSince != 0 {
			continue
		}
		if len(r.batch) > 0 {
			r.allocate(&p)
		}
	}
}

// Cut describes the leases cut short to the record (Stats.CutLeases)
// since the last TakeCut.
type Cut struct {
	Leases uint64 // leases cut
	// Resource is the resource of the deepest cut, and By how much of a
	// lease length the record cut off there (all of it: a zero-length
	// lease).
	Resource string
	By       time.Duration
}

// TakeCut returns the leases cut short to the record since the last
// call, for the caller to report, and starts over.
func (l *Ledger) TakeCut() Cut {
	c := l.cut
	l.cutTaken += c.Leases
	l.cut = Cut{}
	return c
}

// note counts a lease of resource id that the record cut by.
func (c *Cut) note(id string, by time.Duration) {
	c.Leases++
	if by > c.By {
		c.Resource, c.By = id, by
	}
}

// Ready reports whether every resource of slots has been allocated, so
// the request can be answered.
func Ready(slots []Slot) bool {
	for _, s := range slots {
		if s.r != nil && s.r.waitSince != 0 {
			return false
		}
	}
	return true
}

// Lease is what one slot's client holds.
type Lease struct {
	ResourceID string
	Capacity   float64
	Expiry     int64 // unix ns
	Refresh    time.Duration
	// SafeCapacity is the floor (-1 unlimited) and SafeExpiry when it ends
	// (unix ns; 0 for none).
	SafeCapacity float64
	SafeExpiry   int64
	// Shadow is the template's shadow mode: the client is told not to
	// enforce the lease.
	Shadow bool
	// Pace, in a child node's lease, is the regular refresh interval the
	// child paces its own claimants from; Refresh may be shorter.
	Pace time.Duration
}

// Lease returns the lease of an allocated slot (Ready). A client whose
// record is gone (released meanwhile) holds nothing.
func (s Slot) Lease(now int64) Lease {
	r := s.r
	l := Lease{ResourceID: r.id, Expiry: now, Refresh: r.tmpl.RefreshInterval, Shadow: r.tmpl.Shadow}
	if r.tmpl.Floor.Unlimited {
		l.SafeCapacity = -1
	}
	if i, ok := r.lookupAt(s.at, s.client); ok {
		c := r.clients.at(i)
		l.Capacity, l.Expiry, l.Refresh = c.has, c.expiry, time.Duration(c.due-now)
		if c.lapsed || c.expiry <= now {
			// A lease that ends as it is told (the recorded horizon has
			// passed) is told as none: a client whose clock lags would
			// use it past the horizon, which a successor trusts.
			l.Capacity, l.Expiry = 0, now
		}
		l.SafeCapacity, l.SafeExpiry = r.toldFloor(c)
	}
	return l
}

// Events returns what happened to claimants since the last call, for the
// caller to log (child nodes unheard and forgotten), and forgets them.
func (l *Ledger) Events() []Event {
	ev := l.sink.list
	l.sink.list = nil
	return ev
}

// Served reports whether the slot refers to a served resource (else Code
// and Err say why not).
func (s Slot) Served() bool { return s.r != nil }

// EndRound drops the records released in the round and takes the
// allocated resources out of it; waiting ones stay for the next round.
func (l *Ledger) EndRound() {
	kept := l.touched[:0]
	for _, r := range l.touched {
		if r.waitSince != 0 {
			kept = append(kept, r)
			continue
		}
		before := r.records()
		r.dropReleased()
		l.records += r.records() - before
		r.inBatch = false
	}
	clear(l.touched[len(kept):])
	l.touched = kept // still in the round: touch leaves them be
	l.round++
}

// Pending reports whether resources wait for the record, so the caller
// runs a round when the write completes or MaxRecordWait passes.
func (l *Ledger) Pending() bool { return len(l.touched) > 0 }

// MaxRecordWait is how long grants wait for a record write (the
// configured Config.MaxRecordWait, or its default): a caller that sees
// Pending runs a round again within it.
func (l *Ledger) MaxRecordWait() time.Duration { return l.cfg.MaxRecordWait }

// Sweep drops expired leases of idle resources, forgets resources with
// no clients left, and lowers ceilings well above what is outstanding. It
// returns a record to write when that changed the record (or nil).
func (l *Ledger) Sweep(now int64) *Proposal {
	for id, r := range l.resources {
		if len(r.batch) > 0 {
			continue
		}
		before := r.records()
		r.expire(now)
		l.records += r.records() - before
		if !r.learning(now) {
			r.learnedSeen = nil
		}
		if r.predFloorOutstanding(now) == 0 {
			r.floors.seen = nil
		}
		if int(r.clients.len()) == 0 && !r.learning(now) && r.predFloorOutstanding(now) == 0 && (r.ceilingExpiry <= now || r.unlisted) {
			delete(l.resources, id)
			if r.unlisted {
				l.rec.unlisted--
			} else {
				l.rec.bytes -= entryBytes(id)
			}
		}
	}
	return l.shrink(now)
}
