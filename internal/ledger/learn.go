package ledger

import "time"

// learn allocates a share resource in learning mode. A predecessor's
// leases may be outstanding; all that is known is predCeiling, an upper
// bound on their total at learnStart (the predecessor's published ceiling,
// or the capacity when unknown).
//
// Invariant: own + (predCeiling − credited) ≥ the true outstanding total,
// where own is the sum of the leases this coordinator issued. Proof
// sketch: a client's first request in learning mode reports the lease it
// holds (has, expiry). If that lease was unexpired at learnStart (expiry
// − clock skew margin > learnStart) it was counted in predCeiling, and the
// client's new lease replaces it, so up to has may move from the
// predecessor's remainder to the client: the credit, capped so that
// credited never exceeds predCeiling. Leases unexpired at learnStart that
// are not yet replaced sum to at most predCeiling − credited. Leases
// expire, never grow, so the bound holds at every later time. A lease
// told to end by learnStart + skew that may still be in use (its end
// plus the skew is still to come) is counted as the client's own until
// then, not credited: learning may end before that (holders.go).
//
// Allocation: each first-contact client gets its credit back, up to what
// it wants (Doorman's echo, never more than was credited); a returning
// client keeps its lease up to what it wants, and a client keeps at least
// the floor it was counted for (credited from the predecessor's floors, or
// ours), which it may be running on. Then whatever is free, that
// is min(capacity, ceiling) − own − (predCeiling − credited), goes to the
// clients of the round up to their algorithm targets. So own +
// remainder never rises above min(capacity, ceiling) through new grants,
// and a new client gets capacity at once when the predecessor held less
// than the capacity, instead of nothing for the whole learning period.
// Trust: like Doorman, this relies on clients reporting the lease they
// hold; a lying client can take at most the remainder of predCeiling.
func (r *resource) learn(p *roundParams, refresh time.Duration, settle func(i int32, capacity float64, fresh time.Duration)) {
	if r.learnedSeen == nil {
		r.learnedSeen = make(map[string]struct{})
	}
	// credit is what this round credits each client of the batch from the
	// predecessor's ceiling on its first contact.
	credit := make([]float64, len(r.batch))
	for k, i := range r.batch {
		c, rep := r.clients.at(i), &r.reports[k]
		if _, seen := r.learnedSeen[c.id]; seen {
			continue // a returning client
		}
		r.learnedSeen[c.id] = struct{}{}
		if rep.any && r.predHolder(c.id) {
			// It held a lease once: whether that lease still counts or
			// expired, it is accounted for (a credit below, or nothing).
			r.heard(p.now, c.id)
		}
		if rep.capacity > 0 && rep.expiry-r.skew > r.learnStart {
			// No client held more than the predecessor's recorded ceiling
			// or the capacity, and none outside the holders it listed: a
			// report beyond that is a lie (or a bug), capped, counted and
			// logged by the caller.
			limit := min(r.predCeiling, r.tmpl.Capacity)
			if !r.predHolder(c.id) {
				limit = 0
			}
			if rep.capacity > limit {
				rep.capacity = limit
				p.stats.OverClaims++
			}
			if rep.capacity == 0 {
				continue
			}
			cr := max(min(rep.capacity, r.predCeiling-r.credited), 0)
			r.credited += cr
			credit[k] = cr
		} else if rep.capacity > 0 && rep.expiry+r.skew > p.now && r.predHolder(c.id) {
			// It may have expired before the takeover (so not be among
			// what the predecessor's ceiling covers: not credited), but it
			// may still be in use. Hearing its holder may end learning
			// (holders.go): it is counted as the client's own until it
			// ends, beside the predecessor's remainder.
			h := max(min(rep.capacity, r.tmpl.Capacity, r.predCeiling-r.credited), 0)
			if c.heldUntil <= p.now || c.held < h {
				c.held = h
			}
			c.heldUntil = max(c.heldUntil, rep.expiry+r.skew)
			r.recount(i, p.now)
		}
	}
	free := min(r.capacity(p.now), r.ceiling) - r.outstanding(p.now) - r.predOutstanding(p.now)
	base := make([]float64, len(r.batch))
	for k, i := range r.batch {
		c := r.clients.at(i)
		before := c.exposure(p.now)
		// What it holds, lease or the floor it may have fallen back to,
		// is counted already: replacing it with less would idle it (a
		// client on its floor would get nothing until learning ends).
		// But a floor is not promised: as a lease it is a grant, which a
		// client the holder promises leave out waits for, as in allocate.
		floor := c.floorExposure(p.now)
		if !r.mayHoldClient(c, p.now) {
			floor = 0
		}
		base[k] = min(c.wants, max(c.has, floor))
		if credit[k] > 0 {
			// The credited predecessor lease is held until our reply
			// replaces it: it counts as ours from now on.
			base[k] = min(c.wants, max(credit[k]+c.has, floor))
			c.held = max(c.held, credit[k])
			c.heldUntil = max(c.heldUntil, min(r.reports[k].expiry, p.now+int64(r.tmpl.LeaseLength))+r.skew)
			r.recount(i, p.now)
		}
		free -= max(base[k], c.exposure(p.now)) - before
	}
	for k, i := range r.batch {
		c := r.clients.at(i)
		before := max(base[k], c.exposure(p.now))
		extra := max(min(r.target(i)-base[k], free), 0)
		if !r.mayHoldClient(c, p.now) {
			extra = 0 // a new client waits for a record that lists it
		}
		settle(i, base[k]+extra, refresh)
		free -= c.exposure(p.now) - before
	}
}
