package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// The lease record (key "<node>.leases" in the state bucket, a
// LeaseHorizon) is how a coordinator knows which leases it does not know
// about may be outstanding. It is written ahead: before the coordinator
// hands out a lease that would expire after the recorded horizon, or that
// would take a share resource's outstanding total above its recorded
// ceiling, it writes a record that covers it. So at any moment:
//
//   - every lease ever issued for the node expires no later than horizon;
//   - for each resource listed in resources, the unexpired leases sum to at
//     most its ceiling and expire no later than its latest_expiry;
//   - if the record is complete, a share resource not listed has no leases.
//
// Writes are compare-and-set on the revision last read or written, and a
// record with a higher term than ours is never overwritten: a deposed
// coordinator cannot undo its successor's record.
//
// On start, a coordinator that finds no record knows the deployment is
// new and no leases exist: it skips learning mode. One that finds a horizon
// in the past knows all earlier leases have expired: it skips learning mode
// too. Otherwise each resource learns until the earlier of its latest
// expiry (or the horizon) and start + learning_mode_duration, and uses the
// ceiling to hand out what is free at once (see resource.learn). It then
// writes the record under its own term, carrying the predecessor's
// summaries over, before it serves.

// maxRecordBytes bounds the encoded lease record, well below NATS's
// default 1 MiB maximum payload.
const maxRecordBytes = 256 << 10

// DefaultClockSkew is the default Options.ClockSkew.
const DefaultClockSkew = 2 * time.Second

// DefaultCeilingHeadroom is the default Options.CeilingHeadroom.
const DefaultCeilingHeadroom = 0.1

type horizonState struct {
	learningCap int64 // unix ns: leases of a predecessor may exist until then; 0 none
	until       int64 // unix ns: no lease we issue may expire after this
	retryAt     int64 // unix ns: after a failed write, the next attempt
	rev         uint64
	deposed     bool // a record with a higher term exists
	// complete: the predecessor's record was complete (or there was none),
	// so ours may be too.
	complete bool
	// pred holds the predecessor's summaries of resources this coordinator
	// has not yet taken over into its own state.
	pred map[string]*allotpb.ResourceSummary
}

func (c *Coordinator) horizonKey() string { return c.opts.Node + ".leases" }

func (c *Coordinator) loadHorizon(ctx context.Context) error {
	entry, err := c.kv.Get(ctx, c.horizonKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		c.log.Info("no lease horizon recorded: new deployment, learning mode skipped")
		c.horizon.complete = true
		if entry != nil {
			c.horizon.rev = entry.Revision()
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("coordinator: read lease horizon %s/%s: %w", c.opts.StateBucket, c.horizonKey(), err)
	}
	c.horizon.rev = entry.Revision()
	var h allotpb.LeaseHorizon
	if err := protojson.Unmarshal(entry.Value(), &h); err != nil || h.GetHorizon() == nil {
		// A damaged record must not be read as "no leases": assume the
		// worst, that leases of the longest allowed length were just
		// issued. Bounded, so the damage does not outlive them.
		c.log.Warn("lease horizon record unreadable; learning mode for full duration", "err", err)
		c.horizon.learningCap = c.started.Add(config.MaxLeaseLength + c.opts.ClockSkew).UnixNano()
		c.horizon.until = c.horizon.learningCap
		return nil
	}
	if h.GetTerm() > c.Term() {
		c.horizon.deposed = true
		return fmt.Errorf("coordinator: lease record of node %s has term %d, above ours (%d): a newer leader exists", c.opts.Node, h.GetTerm(), c.Term())
	}
	// Allow for clock skew between the writer and us.
	hz := h.GetHorizon().AsTime().Add(c.opts.ClockSkew).UnixNano()
	if hz <= c.started.UnixNano() {
		c.log.Info("lease horizon in the past: all earlier leases expired, learning mode skipped", "horizon", h.GetHorizon().AsTime())
		c.horizon.complete = true
		return nil
	}
	c.horizon.learningCap = hz
	c.horizon.until = hz
	c.horizon.complete = h.GetComplete()
	c.horizon.pred = make(map[string]*allotpb.ResourceSummary, len(h.GetResources()))
	for id, s := range h.GetResources() {
		if s.GetLatestExpiry() != nil && s.GetLatestExpiry().AsTime().Add(c.opts.ClockSkew).UnixNano() > c.started.UnixNano() {
			c.horizon.pred[id] = s
		}
	}
	c.log.Info("leases of a predecessor may be outstanding: learning mode", "until", h.GetHorizon().AsTime(),
		"summaries", len(c.horizon.pred), "complete", c.horizon.complete, "predecessor_term", h.GetTerm())
	return nil
}

// takeOver writes the record under our term before serving: the same
// horizon and the predecessor's summaries. Its compare-and-set also
// proves that what loadHorizon read was the latest record.
func (c *Coordinator) takeOver(ctx context.Context) error {
	now := c.now().UnixNano()
	for attempt := 0; ; attempt++ {
		err := c.writeRecord(ctx, now, c.horizon.until, nil)
		if err == nil {
			return nil
		}
		if c.horizon.deposed || attempt == 2 || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("coordinator: take over lease record: %w", err)
		}
		// Someone wrote since we read: read again from scratch.
		c.horizon = horizonState{}
		if err := c.loadHorizon(ctx); err != nil {
			return err
		}
	}
}

// summaryOf is the record entry of a resource with its pending values.
func summaryOf(ceiling float64, expiry int64) *allotpb.ResourceSummary {
	return &allotpb.ResourceSummary{Ceiling: ceiling, LatestExpiry: timestamppb.New(time.Unix(0, expiry))}
}

// pendingSummary is a raise awaiting a successful write.
type pendingSummary struct {
	r       *resource
	ceiling float64
	expiry  int64
}

// writeRecord writes the record (horizon until, every resource's
// summary with pending raises applied) with compare-and-set. On success
// it commits until and the raises; on failure nothing is raised.
func (c *Coordinator) writeRecord(ctx context.Context, now, until int64, pending []pendingSummary) error {
	if c.horizon.deposed {
		return errors.New("a newer leader exists")
	}
	rec := &allotpb.LeaseHorizon{
		Node:      c.opts.Node,
		Term:      c.Term(),
		ServerId:  c.opts.ServerID,
		Horizon:   timestamppb.New(time.Unix(0, until)),
		Resources: make(map[string]*allotpb.ResourceSummary, len(c.resources)+len(c.horizon.pred)+1),
	}
	// The record may claim completeness only if no unknown predecessor
	// leases can be outstanding.
	if c.horizon.complete || now >= c.horizon.learningCap {
		rec.Complete = true
	}
	for id, s := range c.horizon.pred {
		if s.GetLatestExpiry().AsTime().Add(c.opts.ClockSkew).UnixNano() > now {
			rec.Resources[id] = s
		}
	}
	// A zero ceiling means no leases: a complete record need not list it
	// (and an incomplete one makes a successor assume the worst anyway).
	for id, r := range c.resources {
		if !r.published || r.ceiling == 0 {
			continue
		}
		rec.Resources[id] = summaryOf(r.ceiling, r.summaryExpiry())
	}
	for _, p := range pending {
		if p.ceiling == 0 {
			delete(rec.Resources, p.r.id)
			continue
		}
		rec.Resources[p.r.id] = summaryOf(p.ceiling, max(p.expiry, p.r.summaryExpiry()))
	}
	data, err := protojson.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode lease record: %w", err)
	}
	if len(data) > maxRecordBytes {
		// Too many resources to summarise in one KV value. Leaving any
		// resource out of an incomplete record is safe (a successor then
		// assumes the worst for it and learns as Doorman did), and it keeps
		// the horizon, and so every grant, going.
		c.log.Warn("lease record too large: writing it without per-resource summaries", "bytes", len(data), "limit", maxRecordBytes, "resources", len(rec.Resources))
		rec.Resources, rec.Complete = nil, false
		if data, err = protojson.Marshal(rec); err != nil {
			return fmt.Errorf("encode lease record: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var rev uint64
		if c.horizon.rev == 0 {
			rev, err = c.kv.Create(wctx, c.horizonKey(), data)
		} else {
			rev, err = c.kv.Update(wctx, c.horizonKey(), data, c.horizon.rev)
		}
		cancel()
		if err == nil {
			c.horizon.rev = rev
			c.horizon.until = until
			for _, p := range pending {
				p.r.ceiling = p.ceiling
				p.r.ceilingExpiry = max(p.r.ceilingExpiry, p.expiry)
				p.r.published = true
			}
			c.stats.recordWrites++
			return nil
		}
		if attempt > 0 || !(errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)) {
			return err
		}
		// Someone wrote since: our own ambiguous write, or a predecessor's
		// late one. Retry on the latest revision unless it is a successor's.
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		entry, gerr := c.kv.Get(gctx, c.horizonKey())
		gcancel()
		if gerr != nil {
			return fmt.Errorf("%w (read back: %w)", err, gerr)
		}
		var h allotpb.LeaseHorizon
		if protojson.Unmarshal(entry.Value(), &h) == nil && h.GetTerm() > c.Term() {
			c.horizon.deposed = true
			c.log.Error("lease record written by a newer leader: this coordinator is deposed; it writes nothing more, and its grants stay within its last recorded ceilings and horizon until it stops serving", "term", c.Term(), "record_term", h.GetTerm())
			return fmt.Errorf("lease record has term %d above ours: %w", h.GetTerm(), err)
		}
		c.horizon.rev = entry.Revision()
	}
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

// ensureRecord makes sure the leases of this round may be issued: it
// raises the horizon to cover now+leaseMax and, for every resource of the
// round, lists it, covers its leases' expiry and raises its ceiling to
// what the round could grant. It returns the horizon in force.
func (c *Coordinator) ensureRecord(now int64, leaseMax time.Duration, touched []*resource) int64 {
	need := now + int64(leaseMax)
	until := c.horizon.until
	write := need > until
	if write {
		// Extend by twice the longest lease so writes are rare.
		until = max(need, now+2*int64(leaseMax))
	}
	var pending []pendingSummary
	for _, r := range touched {
		if len(r.batch) == 0 {
			continue
		}
		ll := int64(r.tmpl.LeaseLength)
		p := pendingSummary{r: r, ceiling: r.ceiling, expiry: r.ceilingExpiry}
		raise := !r.published || now+ll > r.ceilingExpiry
		if raise {
			p.expiry = max(r.ceilingExpiry, min(now+2*ll, max(until, need)))
		}
		if r.shared() {
			capacity := r.tmpl.Capacity
			b := r.bound(now)
			inc := 0.0
			for _, i := range r.batch {
				inc += max(min(r.demands[i].Wants, capacity)-r.clients[i].has, 0)
			}
			if want := min(b+inc, max(capacity, b)); want > r.ceiling*(1+1e-12) || !r.published {
				// Headroom only where there is demand: a resource nobody
				// wants any of keeps a zero ceiling and stays out of the record.
				hr := 0.0
				if want > 0 {
					hr = c.headroom(r)
				}
				p.ceiling = max(b, min(capacity, want+hr), r.ceilingOrZero())
				raise = true
			}
		} else if !math.IsInf(r.ceiling, 1) || !r.published {
			// Capacity is per client: no bound. Also when the template just
			// changed from a share algorithm, whose finite ceiling no longer
			// bounds what this round may grant.
			p.ceiling = math.Inf(1)
			raise = true
		}
		if raise {
			pending = append(pending, p)
		}
	}
	if !write && len(pending) == 0 {
		return c.horizon.until
	}
	if now < c.horizon.retryAt {
		return c.horizon.until
	}
	if err := c.writeRecord(c.ioCtx, now, until, pending); err != nil {
		c.horizon.retryAt = now + int64(time.Second)
		c.stats.horizonErrors++
		c.log.Error("cannot record lease horizon and ceilings; leases are cut short and grants held to the recorded ones", "err", err)
	}
	return c.horizon.until
}

func (r *resource) ceilingOrZero() float64 {
	if math.IsInf(r.ceiling, 1) {
		return 0
	}
	return r.ceiling
}

func (c *Coordinator) headroom(r *resource) float64 { return c.opts.CeilingHeadroom * r.tmpl.Capacity }

// shrinkRecord lowers ceilings that are well above what is outstanding,
// and drops expired summaries, so that a successor can hand out more at
// once. Lowered ceilings apply before the write (they bind us even if the
// write fails). Called from the sweep, at most once a second.
func (c *Coordinator) shrinkRecord(now int64) {
	if c.horizon.rev == 0 && c.horizon.until == 0 && len(c.resources) == 0 {
		return
	}
	changed := false
	for id, s := range c.horizon.pred {
		if s.GetLatestExpiry().AsTime().Add(c.opts.ClockSkew).UnixNano() <= now {
			delete(c.horizon.pred, id)
			changed = true
		}
	}
	for _, r := range c.resources {
		if !r.published || !r.shared() {
			continue
		}
		b, h := r.bound(now), c.headroom(r)
		if r.ceiling > b+2*h {
			r.ceiling = b + h
			changed = true
		}
	}
	if !changed || now < c.horizon.retryAt {
		return
	}
	if err := c.writeRecord(c.ioCtx, now, c.horizon.until, nil); err != nil {
		c.horizon.retryAt = now + int64(time.Second)
		c.stats.horizonErrors++
		c.log.Warn("cannot record lowered ceilings", "err", err)
	}
}
