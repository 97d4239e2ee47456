package quota

import (
	"strings"
	"time"
)

// ReasonBadRequest rejects a request whose token count is negative, or
// that names a dynamic bucket with a malformed name. It is for callers of
// the Table that skip validation: the quota server answers both with a
// 400 before asking it (see SplitBucket), so it never reaches the wire.
const ReasonBadRequest = "bad_request"

// maxBanKeys bounds the ban trackers a Table keeps (about 80 bytes each).
// Past it, keys not yet tracked are not counted towards a ban until Sweep
// frees trackers; the buckets' limits still hold for them.
const maxBanKeys = 1 << 16

// banKey is one key a ban counts for: a client of a bucket, or the bucket
// as a whole (client "").
// maxClientLen is the prefix of a client id bans tell clients apart by.
const maxClientLen = 128

type banKey struct{ bucket, client string }

// banState counts tokens asked for in the interval starting at start.
type banState struct {
	start, count, until int64
	// expire is when the tracker holds nothing a new one would not.
	expire int64
}

// banned counts n tokens asked for by the request's key and reports
// whether the key is banned, and for how much longer. Asking while banned
// does not extend the ban. Tokens are counted whatever the algorithm then
// answers: a client hammering an exhausted bucket is the one to ban.
func (t *Table) banned(b *bucket, client string, n, now int64) (bool, int64) {
	ban := &b.c.spec.Ban
	client = client[:min(len(client), maxClientLen)]
	k := banKey{b.key, client}
	st := t.bans[k]
	if st == nil {
		if len(t.bans) >= maxBanKeys {
			return false, 0
		}
		// A copy, so the tracker does not keep the request's buffer.
		k.client = strings.Clone(client)
		st = &banState{start: now}
		t.bans[k] = st
	}
	if st.until > now {
		return true, st.until - now
	}
	if now-st.start >= int64(ban.Interval) {
		st.start, st.count = now, 0
	}
	st.count += n
	st.expire = st.start + int64(ban.Interval)
	if st.count > ban.Threshold {
		st.until = now + int64(ban.Duration)
		st.start, st.count = st.until, 0
		st.expire = st.until
		return true, st.until - now
	}
	return false, 0
}

// decide answers req from b at now (Unix ns), counting into ev.
func (t *Table) decide(b *bucket, ev *Events, req Request, now int64) Decision {
	c := b.c
	d := Decision{Status: Rejected, Limit: c.capacity}
	n := req.Tokens
	switch {
	case n < 0:
		ev.BadRequest++
		d.Reason = ReasonBadRequest
		return d
	case n > c.maxTokens:
		ev.TooManyTokens++
		d.Reason = ReasonTooManyTokens
		return d
	}
	if c.spec.Ban.Threshold > 0 {
		if ok, left := t.banned(b, req.ClientID, n, now); ok {
			ev.Banned++
			d.Reason, d.RetryAfter = ReasonBanned, time.Duration(left)
			return d
		}
	}
	// tt is the bucket's clock: never before what it already decided.
	tt := max(now, b.mark)
	lead := tt - now
	b.mark = tt
	b.advance(tt)
	if n == 0 {
		d.Status, d.Remaining = OK, b.remaining(tt)
		t.warn(c, ev, &d)
		return d
	}
	maxWait := c.wait
	if req.MaxWait >= 0 && int64(req.MaxWait) < maxWait {
		maxWait = int64(req.MaxWait)
	}
	switch c.spec.Algorithm {
	case TokenBucket:
		maxWait = min(maxWait, c.debt)
	case SlidingWindowLog:
		// Reserving at most one window ahead bounds the log to twice the
		// limit in entries.
		maxWait = min(maxWait, c.window)
	}
	// A sheddable request is admitted only at once and only if the
	// reserve would still be there after it: it never waits, since
	// whatever it waited for would be taken from critical requests.
	if req.Sheddable && c.reserve > 0 {
		w, ok := b.place(n+c.reserve, tt)
		if !ok || w > 0 || lead > 0 {
			ev.Reserved++
			d.Reason, d.RetryAfter = ReasonReserved, time.Duration(max(lead+w, 1))
			d.Remaining = b.remaining(tt)
			return d
		}
	}
	w, ok := b.place(n, tt)
	// from is the earliest arrival that may take effect at tt+w.
	from := b.earliestArrival(tt + w)
	if !ok || from > now || lead+w > maxWait {
		if maxWait == 0 {
			ev.NoWait++
			d.Reason = ReasonNoWait
		} else {
			ev.Timeout++
			d.Reason = ReasonTimeout
		}
		if ok {
			// Asking again then is answered with a wait of maxWait, and
			// from on, the tokens' window is the next one at most.
			r := lead + w - maxWait
			if from > now {
				r = max(r, from-now)
			}
			d.RetryAfter = time.Duration(r)
		} else {
			d.RetryAfter = time.Duration(max(lead+w, 1))
		}
		d.Remaining = b.remaining(tt)
		return d
	}
	b.commit(n, tt, w)
	ev.Tokens += uint64(n)
	d.Remaining = b.remaining(tt)
	if d.Wait = time.Duration(lead + w); d.Wait > 0 {
		d.Status = OKWait
		ev.ServedWait++
	} else {
		d.Status = OK
		ev.Served++
	}
	t.warn(c, ev, &d)
	return d
}

// warn marks d past the soft limit.
func (t *Table) warn(c *compiled, ev *Events, d *Decision) {
	if c.soft > 0 && d.Remaining < c.soft {
		d.Warning = WarningSoftLimit
		ev.SoftLimit++
	}
}
