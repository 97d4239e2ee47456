package coordinator

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// sweepInterval is how often idle resources drop expired leases.
const sweepInterval = time.Second

// loop runs allocation rounds until Stop.
func (c *Coordinator) loop() {
	defer close(c.done)
	sweep := time.NewTicker(sweepInterval)
	defer sweep.Stop()
	timer := time.NewTimer(0)
	<-timer.C
	var last time.Time
	for {
		select {
		case <-c.stop:
			c.runRound()
			return
		case <-sweep.C:
			c.sweep()
		case <-c.wake:
			// Let the round interval fill up before answering.
			if wait := c.round - time.Since(last); c.round > 0 && wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-c.stop:
					timer.Stop()
					c.runRound()
					return
				}
			}
			last = time.Now()
			c.runRound()
		}
	}
}

// runRound takes every queued request, applies it to the state, runs each
// touched resource's algorithm once, and answers every requester.
func (c *Coordinator) runRound() {
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	start := time.Now()
	now := c.now().UnixNano()
	set := c.opts.Templates.Current()
	var touched []*resource
	touch := func(r *resource) {
		if !r.inBatch {
			r.inBatch = true
			r.expire(now)
			touched = append(touched, r)
		}
	}

	// Apply every request to the state.
	for _, req := range batch {
		switch req.kind {
		case kindGet:
			c.applyGet(req, set, now, touch)
		case kindRelease:
			for _, id := range req.rel.GetResourceId() {
				if r := c.resources[id]; r != nil && r.markReleased(req.rel.GetClientId()) {
					touch(r)
					req.released++
				}
			}
		}
	}

	// Record the horizon before handing out leases that reach past it.
	var leaseMax time.Duration
	for _, r := range touched {
		if len(r.batch) > 0 {
			leaseMax = max(leaseMax, r.tmpl.LeaseLength)
		}
	}
	horizon := c.horizon.until
	if leaseMax > 0 {
		horizon = c.ensureRecord(now, leaseMax, touched)
	}
	p := roundParams{now: now, horizon: horizon, minFresh: max(c.round, 50*time.Millisecond), scratch: &c.scratch}
	for _, r := range touched {
		if len(r.batch) > 0 {
			r.allocate(&p)
		}
		r.safeCap = r.safeCapacity()
	}

	// Answer.
	term := c.Term()
	for _, req := range batch {
		switch {
		case req.errCode != 0:
			c.roundError(req.msg, req.enc, req.errCode, req.errText)
		case req.kind == kindGet && req.enc == wire.Protobuf:
			c.replyLeases(req, now, term)
		case req.kind == kindGet:
			c.reply(req.msg, req.enc, c.getResponse(req, now, term))
		default:
			c.reply(req.msg, req.enc, &allotpb.ReleaseCapacityResponse{Released: req.released, Term: term})
		}
	}
	for _, r := range touched {
		r.dropReleased()
		r.inBatch = false
	}
	c.stats.round(len(batch), time.Since(start))
	c.mu.Lock()
	c.statsSnap = c.stats
	c.mu.Unlock()
}

// applyGet resolves every requested resource to a template first. A
// resource that cannot be served (no template matches it, or the node's
// resource limit is reached) gets an error of its own in the reply and
// changes nothing; the others are served. If none can be, the whole
// request gets the error.
func (c *Coordinator) applyGet(req *request, set *config.Set, now int64, touch func(*resource)) {
	res := req.get.GetResource()
	tmpls := make([]*config.Template, len(res))
	req.slots = make([]slot, len(res))
	served, added := 0, 0
	for k, rr := range res {
		id := rr.GetResourceId()
		r := c.resources[id]
		if r != nil && r.gen == set.Generation {
			tmpls[k] = r.tmpl
			served++
			continue
		}
		if tmpls[k] = set.Match(id); tmpls[k] == nil {
			req.slots[k] = slot{code: CodeNoTemplate, err: fmt.Sprintf("resource %q matches no template and unmatched resources are rejected; add a template with 'allot config put'", id)}
			if why := set.Refused(id); why != "" {
				req.slots[k].err = fmt.Sprintf("resource %q is refused: %s", id, why)
			}
			continue
		}
		if r == nil {
			if len(c.resources)+added >= c.opts.MaxResources {
				tmpls[k] = nil
				req.slots[k] = slot{code: CodeTooMany, err: fmt.Sprintf("this node keeps state for %d resources and the limit is %d (--max-resources); %q would be a new one", len(c.resources)+added, c.opts.MaxResources, id)}
				continue
			}
			added++
		}
		served++
	}
	if served == 0 {
		req.errCode, req.errText = int(req.slots[0].code), req.slots[0].err
		return
	}
	for k, rr := range res {
		if tmpls[k] == nil {
			continue
		}
		r := c.resourceFor(rr.GetResourceId(), tmpls[k], set.Generation, now)
		touch(r)
		var hasExpiry int64
		if e := rr.GetHas().GetExpiryTime(); e != nil {
			hasExpiry = e.AsTime().UnixNano()
		}
		i := r.upsert(req.get.GetClientId(), rr.GetWants(), 1, rr.GetPriority(), rr.GetHas().GetCapacity(), hasExpiry, now)
		req.slots[k] = slot{r: r, i: i}
	}
}

// resourceFor returns the state of resource id, creating it or updating
// its template as configuration changes.
func (c *Coordinator) resourceFor(id string, t *config.Template, gen uint64, now int64) *resource {
	r := c.resources[id]
	if r == nil {
		r = c.newResource(id, t, gen)
		c.resources[id] = r
		return r
	}
	if r.tmpl != t {
		c.log.Info("resource template changed", "resource", id, "template", t.Name, "revision", t.Revision)
	}
	r.tmpl, r.gen = t, gen
	return r
}

// replyLeases answers a binary GetCapacity request on the fast path: the
// reply is encoded straight from the state into a buffer reused across
// replies (the NATS client copies it on publish).
func (c *Coordinator) replyLeases(req *request, now int64, term uint64) {
	entries := c.leaseBuf[:0]
	for k, s := range req.slots {
		if s.r == nil {
			entries = append(entries, wire.LeaseReply{ResourceID: req.get.GetResource()[k].GetResourceId(), Error: s.err, ErrorCode: s.code})
			continue
		}
		cl := &s.r.clients[s.i]
		entries = append(entries, wire.LeaseReply{
			ResourceID: s.r.id, Capacity: cl.has, Expiry: cl.expiry,
			Refresh: time.Duration(cl.due - now), SafeCapacity: s.r.safeCap,
		})
	}
	c.leaseBuf = entries
	c.replyBuf = wire.AppendGetCapacityResponse(c.replyBuf[:0], term, entries)
	c.publish(req.msg, nil, c.replyBuf)
}

// getResponse builds the reply message for the JSON path.
func (c *Coordinator) getResponse(req *request, now int64, term uint64) *allotpb.GetCapacityResponse {
	resp := &allotpb.GetCapacityResponse{Term: term, Response: make([]*allotpb.ResourceResponse, len(req.slots))}
	for k, s := range req.slots {
		if s.r == nil {
			resp.Response[k] = &allotpb.ResourceResponse{ResourceId: req.get.GetResource()[k].GetResourceId(), Error: s.err, ErrorCode: s.code}
			continue
		}
		cl := &s.r.clients[s.i]
		resp.Response[k] = &allotpb.ResourceResponse{
			ResourceId: s.r.id,
			Gets: &allotpb.Lease{
				Capacity:        cl.has,
				ExpiryTime:      timestamppb.New(time.Unix(0, cl.expiry)),
				RefreshInterval: durationpb.New(time.Duration(cl.due - now)),
			},
			SafeCapacity: s.r.safeCap,
		}
	}
	return resp
}

// newResource creates the state of a resource and decides on learning
// mode from the predecessor's record (see horizon.go and resource.learn).
func (c *Coordinator) newResource(id string, t *config.Template, gen uint64) *resource {
	r := newResource(id, t, gen)
	r.ceiling, r.ceilingExpiry = 0, 0 // nothing published for it yet
	pred, listed := c.horizon.pred[id]
	if listed {
		// Carried over into our record by takeOver: it binds us too.
		delete(c.horizon.pred, id)
		r.published = true
		r.ceiling = pred.GetCeiling()
		r.predExpiry = pred.GetLatestExpiry().AsTime().UnixNano()
		r.ceilingExpiry = r.predExpiry
	}
	// No predecessor leases can exist, or the operator disabled learning.
	if c.horizon.learningCap == 0 || t.LearningModeDuration <= 0 {
		return r
	}
	// The predecessor's bound is worked out whatever this template's
	// algorithm, so that a template change during learning (STATIC to
	// FAIR_SHARE, say) still counts the predecessor's leases.
	r.learnStart = c.started.UnixNano()
	r.skew = int64(c.opts.ClockSkew)
	switch {
	case listed && !math.IsInf(pred.GetCeiling(), 0) && !math.IsNaN(pred.GetCeiling()) && pred.GetCeiling() >= 0:
		r.predCeiling = pred.GetCeiling()
		// Learn until the predecessor's leases for it have expired. The
		// current template's lease length does not shorten this: the
		// predecessor may have issued longer leases before a change.
		r.learningUntil = r.predExpiry + r.skew
	case listed:
		// Not bounded by the predecessor (it used a per-client algorithm,
		// so any number of clients may hold up to the capacity each).
		r.predCeiling = math.Inf(1)
		r.learningUntil = r.predExpiry + r.skew
	case c.horizon.complete:
		// A complete record without it: no leases outstanding.
	default:
		// Not in the record (an incomplete or older record): Doorman's
		// rule, learn for learning_mode_duration and assume the
		// predecessor leased out up to the capacity.
		r.predCeiling = t.Capacity
		r.learningUntil = min(c.horizon.learningCap, c.started.Add(t.LearningModeDuration).UnixNano())
	}
	return r
}

// sweep drops expired leases of idle resources and forgets resources with
// no clients left.
func (c *Coordinator) sweep() {
	now := c.now().UnixNano()
	for id, r := range c.resources {
		r.expire(now)
		if !r.learning(now) {
			r.learnedSeen = nil
		}
		if len(r.clients) == 0 && !r.learning(now) && r.ceilingExpiry <= now {
			delete(c.resources, id)
		}
	}
	c.shrinkRecord(now)
}
