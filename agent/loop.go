package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// sampleEvery is how often demand is sampled between refreshes, so that
// growing demand can trigger an early refresh.
const sampleEvery = 500 * time.Millisecond

// minRefreshDelay bounds how soon a refresh follows the previous one, even
// if the coordinator asks for a shorter refresh interval.
const minRefreshDelay = 10 * time.Millisecond

// run is the agent's background loop: it samples demand, refreshes all
// leases (in one GetCapacity request up to wire.MaxResourcesPerReq
// resources), releases resources closed on their own, applies lease expiry
// and the failure mode, and reports changes. Every request goes out from
// here, one exchange after the other, so a release never overtakes a
// GetCapacity that names the same resource.
func (a *Agent) run() {
	defer close(a.done)
	defer a.report() // changes noted before Close
	clk := a.o.clock
	gap := a.o.minRefreshGap
	// holdUntil: an overloaded service asked for no request before then.
	// lastEarly: the last refresh sent before its regular time, from which
	// the next early one keeps the gap (WithMinRefreshGap); a regular
	// refresh does not hold up an early one, or a resource created just
	// after it would wait blocked for the gap.
	var nextRefresh, lastEarly, holdUntil time.Time
	nextSample := clock.Now(clk).Add(sampleEvery)
	for {
		// Before any refresh: a resource closed and created again is
		// asked for only once its release has been answered.
		a.sendReleases()
		t := clock.Now(clk)
		if !t.Before(nextSample) {
			a.sampleAll(t)
			nextSample = t.Add(sampleEvery)
		}
		a.mu.Lock()
		due, early := false, false
		if len(a.res) > 0 && !a.closed {
			due = !nextRefresh.IsZero() && !t.Before(nextRefresh)
			if !due && !a.earlyAt.IsZero() && !t.Before(a.earlyAt) && (lastEarly.IsZero() || t.Sub(lastEarly) >= gap) && !t.Before(holdUntil) {
				due, early = true, true
			}
		}
		a.mu.Unlock()
		if due {
			err := a.refresh(t)
			if early {
				lastEarly = t
			}
			nextRefresh = t.Add(a.nextDelay(err))
			if se := (*ServiceError)(nil); errors.As(err, &se) && se.RetryAfter > 0 {
				// The service sheds load: asking sooner than it said
				// only adds to what it refuses (its wait is jittered).
				holdUntil = t.Add(se.RetryAfter)
				if nextRefresh.Before(holdUntil) {
					nextRefresh = holdUntil
				}
			}
			t = clock.Now(clk)
		}
		a.applyAll(t)
		if due {
			a.answerAsks()
		}

		wake := nextSample
		a.mu.Lock()
		if len(a.res) > 0 {
			if !nextRefresh.IsZero() && nextRefresh.Before(wake) {
				wake = nextRefresh
			}
			if !a.earlyAt.IsZero() {
				e := a.earlyAt
				if !lastEarly.IsZero() && e.Before(lastEarly.Add(gap)) {
					e = lastEarly.Add(gap)
				}
				if e.Before(holdUntil) {
					e = holdUntil // the service asked for nothing sooner
				}
				if e.Before(wake) {
					wake = e
				}
			}
			for _, r := range a.res {
				if r.leased && r.expiry.Before(wake) {
					wake = r.expiry
				}
				if !r.leased && !r.safeUntil.IsZero() && t.Before(r.safeUntil) && r.safeUntil.Before(wake) {
					wake = r.safeUntil // the floor ends: nothing after it
				}
			}
		}
		a.mu.Unlock()
		d := max(wake.Sub(t), time.Millisecond)
		timerC, stop := clock.NewTimer(clk, d)
		select {
		case <-a.stop:
			stop()
			return
		case <-a.kick:
			stop()
		case <-timerC:
		}
	}
}

// nextDelay is the time until the next regular refresh: the shortest
// refresh interval among the leases, with jitter, or after a failure a
// capped exponential backoff with jitter.
func (a *Agent) nextDelay(err error) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	interval := time.Duration(0)
	for _, r := range a.res {
		if r.leased && r.refresh > 0 && (interval == 0 || r.refresh < interval) {
			interval = r.refresh
		}
	}
	if interval == 0 {
		interval = a.interval // leases expired: keep the last known pace
	}
	if interval == 0 {
		interval = defaultRefresh
	}
	if err == nil {
		return max(time.Duration(float64(interval)*(0.85+0.15*rand.Float64())), minRefreshDelay)
	}
	limit := max(interval, backoffBase)
	d := backoffBase << min(a.failures-1, 20)
	if d <= 0 || d > limit {
		d = limit
	}
	return time.Duration(float64(d) * (0.5 + 0.5*rand.Float64()))
}

// sampleAll updates the automatic wants and schedules an early refresh when
// one grew a lot since it was last sent.
func (a *Agent) sampleAll(t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.res {
		a.sampleLocked(r, t)
		if r.auto && r.est.value > r.sentWants && bigChange(r.sentWants, r.est.value) {
			a.scheduleEarlyLocked(t)
		}
	}
}

// applyAll applies lease expiry and the failure mode to every resource and
// reports the changes to the OnChange function.
func (a *Agent) applyAll(t time.Time) {
	a.mu.Lock()
	for _, r := range a.res {
		if st, ok := a.applyLocked(r, t); ok {
			a.noteLocked(st)
		}
	}
	a.mu.Unlock()
	a.report()
}

// report calls the OnChange function with the changes noted so far, in
// order. Only the loop calls it, so that the function always runs on the
// loop's goroutine, as WithOnChange says.
func (a *Agent) report() {
	a.mu.Lock()
	notes := a.notes
	a.notes = nil
	a.mu.Unlock()
	for _, st := range notes {
		a.o.onChange(st)
	}
}

// sendReleases sends ReleaseCapacity for the resources closed on their own
// and gives each closer the outcome.
func (a *Agent) sendReleases() {
	a.mu.Lock()
	rels := a.releases
	a.releases = nil
	a.mu.Unlock()
	if len(rels) == 0 {
		return
	}
	ids := make([]string, len(rels))
	for i, rel := range rels {
		ids[i] = rel.id
	}
	err := a.release(ids)
	for _, rel := range rels {
		rel.done <- err
	}
}

// batchReserve is what a GetCapacity or ReleaseCapacity request may need
// beyond its list of resources (client id, headers, framing), when
// requests are cut to the server's maximum payload.
const batchReserve = 4 << 10

// batches cuts n items into consecutive runs [lo, hi) of at most
// wire.MaxResourcesPerReq items, the most a coordinator accepts in one
// request, whose encoded sizes add up to no more than the connection's
// maximum payload and the coordinator's protobuf request limit allow.
func (a *Agent) batches(n int, size func(i int) int) [][2]int {
	maxBytes := max(min(int(a.nc.MaxPayload()), wire.MaxProtobufRequest)-batchReserve, batchReserve)
	var out [][2]int
	lo, bytes := 0, 0
	for i := range n {
		sz := size(i)
		if i > lo && (i-lo == wire.MaxResourcesPerReq || bytes+sz > maxBytes) {
			out = append(out, [2]int{lo, i})
			lo, bytes = i, 0
		}
		bytes += sz
	}
	if n > lo {
		out = append(out, [2]int{lo, n})
	}
	return out
}

// fieldSize is the encoded size of a length-delimited field of n bytes
// (tag and length prefix included).
func fieldSize(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// refresh asks for capacity on all resources and installs the leases
// returned. Beyond wire.MaxResourcesPerReq resources the request is split;
// the parts are sent together and the refresh ends when all have been
// answered or have timed out. It reports the first part's error, if any.
func (a *Agent) refresh(t time.Time) error {
	a.mu.Lock()
	if a.closed {
		// Close has already listed what to release: a request now would
		// bring a lease that nobody gives back.
		a.mu.Unlock()
		return nil
	}
	a.earlyAt = time.Time{}
	sent := make([]*resource, 0, len(a.res))
	for _, r := range a.res {
		sent = append(sent, r)
	}
	slices.SortFunc(sent, func(x, y *resource) int { return strings.Compare(x.id, y.id) })
	rrs := make([]*allotpb.ResourceRequest, len(sent))
	held := false // a lease of this coordinator, even one that has lapsed
	for i, r := range sent {
		held = held || r.leased
		a.sampleLocked(r, t)
		w := r.currentWantsLocked()
		r.sentWants, r.sent = w, true
		rr := &allotpb.ResourceRequest{ResourceId: r.id, Priority: r.priority, Wants: w}
		if !r.expiry.IsZero() {
			// The last lease, also once it has expired: a coordinator
			// that took over counts its holder heard and can end learning
			// (it holds nothing beyond its expiry).
			rr.Has = &allotpb.Lease{
				Capacity:        r.granted,
				ExpiryTime:      timestamppb.New(r.expiry),
				RefreshInterval: durationpb.New(r.refresh),
			}
		}
		if r.safeKnown && r.safe > 0 && !r.safeUntil.IsZero() && t.Before(r.safeUntil) {
			// The floor it falls back to: a coordinator counts it as held
			// (a new leader credits it, as it does a lease a predecessor
			// issued), and a lower one than last told confirms a shrink.
			rr.Safe = &allotpb.Lease{Capacity: r.safe, ExpiryTime: timestamppb.New(r.safeUntil)}
		}
		rrs[i] = rr
	}
	a.mu.Unlock()

	// One request per partition of the node's resources (one without
	// lease partitions), each cut to the coordinator's limits; all are
	// sent together.
	n := a.nparts
	byPart := make([][]leaseCall, n) // each partition's calls
	for p, idx := range partitionGroups(sent, n) {
		for _, b := range a.batches(len(idx), func(i int) int { return fieldSize(proto.Size(rrs[idx[i]])) }) {
			c := leaseCall{part: p, sent: make([]*resource, 0, b[1]-b[0]),
				req: &allotpb.GetCapacityRequest{ClientId: a.o.clientID, Resource: make([]*allotpb.ResourceRequest, 0, b[1]-b[0])}}
			for _, i := range idx[b[0]:b[1]] {
				c.sent, c.req.Resource = append(c.sent, sent[i]), append(c.req.Resource, rrs[i])
			}
			byPart[p] = append(byPart[p], c)
		}
	}
	get := func(c *leaseCall) {
		c.resp = &allotpb.GetCapacityResponse{}
		c.err = a.get(c.part, n, c.req, c.resp, held)
	}
	// Each partition's leases are installed as soon as its own calls are
	// answered: a partition that does not answer (its leader frozen, or
	// killed before its server noticed) holds up only its resources. Had
	// the others waited for its time-out, a lease shorter than twice
	// that would lapse between refreshes that were all answered.
	type settled struct {
		answered bool
		interval time.Duration
		err      error
	}
	results := make([]settled, n)
	settle := func(p int, own []leaseCall) {
		if len(own) == 1 {
			get(&own[0])
		} else {
			var wg sync.WaitGroup
			for k := range own {
				wg.Go(func() { get(&own[k]) })
			}
			wg.Wait()
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		r := &results[p]
		r.answered, r.interval, r.err = a.settleLocked(p, n, own)
	}
	var wg sync.WaitGroup
	for p, own := range byPart {
		if len(own) > 0 {
			wg.Go(func() { settle(p, own) })
		}
	}
	wg.Wait()

	a.mu.Lock()
	defer a.mu.Unlock()
	var firstErr error
	var interval time.Duration
	answered := false
	for _, r := range results {
		answered, firstErr = answered || r.answered, cmp.Or(firstErr, r.err)
		if iv := r.interval; iv > 0 && (interval == 0 || iv < interval) {
			interval = iv
		}
	}
	if answered {
		a.lastOK = clock.Now(a.o.clock)
		a.interval = interval
	}
	if firstErr != nil {
		a.failures++
		// Once closed, a failure changes nothing the caller can act on.
		if a.lastErr == nil && !a.closed {
			a.log.Warn("allot: capacity refresh failed; keeping leases until they expire", "node", a.o.node, "error", firstErr)
		}
		a.lastErr = firstErr
		return firstErr
	}
	if a.lastErr != nil {
		a.log.Info("allot: capacity refresh recovered", "failures", a.failures)
	}
	a.lastErr, a.failures = nil, 0
	return nil
}

// settleLocked takes the answers of partition p's calls (of n): a part
// answered by a lower term than another (or than seen before) comes from
// a deposed coordinator. It installs the others' leases and reports
// whether any was, the shortest refresh interval of the leases installed,
// and the first error.
func (a *Agent) settleLocked(p, n int, calls []leaseCall) (answered bool, interval time.Duration, firstErr error) {
	st := &partState{}
	if n == a.nparts {
		st = &a.terms[p] // else the partitions changed meanwhile: no term to keep
	}
	var top uint64 // the highest term among the replies
	replied := false
	for _, c := range calls {
		if c.part == p && c.err == nil {
			top, replied = max(top, c.resp.GetTerm()), true
		}
	}
	term := max(st.term, top)
	if replied && top < st.term {
		// Every answer is below the highest term seen. A deposed leader
		// goes silent (its successor answers from then on), so answers
		// that stay below it mean that term is gone, or was never real (a
		// forged reply): after staleTermLimit refreshes, follow the
		// coordinator that answers rather than refuse it for ever.
		st.stale++
		if st.stale >= staleTermLimit {
			a.log.Warn("allot: coordinator term went back; following the coordinator that answers",
				"subject", a.subjects(p, n).get, "from", st.term, "to", top, "refreshes", st.stale)
			term, st.term = top, top
		}
	} else {
		st.stale = 0
	}
	for _, c := range calls {
		if c.part != p {
			continue
		}
		err := c.err
		if err == nil && c.resp.GetTerm() < term {
			err = fmt.Errorf("%w: got term %d, have seen %d", ErrStaleTerm, c.resp.GetTerm(), term)
		}
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		answered = true
		if iv := a.installLocked(c.sent, c.resp); iv > 0 && (interval == 0 || iv < interval) {
			interval = iv
		}
	}
	if answered {
		st.term = term
	}
	return answered, interval, firstErr
}

// staleTermLimit is how many refreshes in a row answered only by lower
// terms make the agent follow the lower term: a single forged reply with a
// huge term must not lock the agent out of its coordinator for ever.
const staleTermLimit = 3

// installLocked installs the leases of resp, the answer to a request for
// sent (sorted by id), and returns the shortest refresh interval of the
// leases installed (0 if none). Resources closed since are left alone.
func (a *Agent) installLocked(sent []*resource, resp *allotpb.GetCapacityResponse) (interval time.Duration) {
	// No coordinator issues a longer lease; a reply claiming one (a forged
	// "until 2999") would otherwise be reported back for ever and refused
	// as a bad request.
	longest := clock.Now(a.o.clock).Add(wire.MaxLeaseLength)
	for _, rr := range resp.GetResponse() {
		i, ok := slices.BinarySearchFunc(sent, rr.GetResourceId(), func(r *resource, id string) int { return strings.Compare(r.id, id) })
		if !ok || sent[i].closed {
			continue
		}
		r := sent[i]
		if e := rr.GetError(); e != "" {
			// Not served, while the other resources were: keep whatever
			// lease it has until it expires, then its mode applies.
			if r.err == nil {
				a.log.Warn("allot: coordinator refused a resource", "resource", r.id, "code", rr.GetErrorCode(), "error", e)
			}
			r.err = &ServiceError{Code: int(rr.GetErrorCode()), Description: e}
			continue
		}
		r.err = nil
		r.shadow = rr.GetShadow()
		g := rr.GetGets()
		c := g.GetCapacity()
		if g == nil || g.GetExpiryTime() == nil || math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
			a.log.Warn("allot: ignoring invalid lease", "resource", r.id, "lease", g.String())
			continue
		}
		r.leased, r.granted = true, c
		r.expiry = g.GetExpiryTime().AsTime()
		if r.expiry.After(longest) {
			r.expiry = longest
		}
		r.refresh = g.GetRefreshInterval().AsDuration()
		if r.refresh <= 0 {
			r.refresh = defaultRefresh
		}
		if interval == 0 || r.refresh < interval {
			interval = r.refresh
		}
		if sc := rr.GetSafeCapacity(); !math.IsNaN(sc) {
			r.safe, r.safeKnown, r.safeUntil = sc, true, time.Time{}
			if sc < 0 {
				r.safe = -1
			}
			if e := rr.GetSafeExpiryTime(); e != nil && sc >= 0 {
				r.safeUntil = e.AsTime()
				if r.safeUntil.After(longest) {
					r.safeUntil = longest
				}
			}
		}
	}
	return interval
}

// call sends req as binary protobuf to subj and decodes the reply into
// resp, turning a micro-style error reply into a *ServiceError. It is not
// cancelled by Close: Close waits for the answer, so that what it sends
// next cannot overtake this request.
//
// Every request says how long the agent waits for it (Allot-Timeout), so
// that an overloaded service drops it rather than answer it too late; a
// request of a client holding a lease says who it is (Allot-Client), so
// that the coordinator takes it before newcomers' (subjects.md,
// "Overload").
func (a *Agent) call(subj string, req, resp proto.Message, held bool) error {
	client := ""
	if held {
		client = a.o.clientID
	}
	h, err := a.rpc.ProtobufReply(context.Background(), a.o.requestTimeout, subj, client, req, resp)
	a.learnPartitions(h)
	return err
}

// get sends a GetCapacity request. One of a client that holds or held a
// lease is a holder's refresh: it goes to allot.<node>.capacity.refresh,
// which the coordinator serves on a subscription of its own, before
// newcomers' gets (subjects.md, "Overload"). A coordinator that predates
// that subject answers 404 there, and a responder that serves
// capacity.get alone leaves it without responders: the request is then
// sent again as a get.
func (a *Agent) get(p, n int, req *allotpb.GetCapacityRequest, resp *allotpb.GetCapacityResponse, held bool) error {
	err := a.getOn(a.subjects(p, n), req, resp, held)
	if n > 1 && errors.Is(err, nats.ErrNoResponders) {
		// Nobody serves the partition's subject: its leader is down (then
		// partition 0 relays, and its answer says which resources it
		// could not serve), or the node no longer has partitions (then
		// the answer says so). Either way the node's plain subjects
		// answer.
		err = a.getOn(a.subjects(0, 1), req, resp, held)
	}
	return err
}

// getOn sends a GetCapacity request on subj's subjects (see get).
func (a *Agent) getOn(subj leaseSubjects, req *allotpb.GetCapacityRequest, resp *allotpb.GetCapacityResponse, held bool) error {
	if !held && !holds(req) {
		return a.call(subj.get, req, resp, false)
	}
	err := a.call(subj.refresh, req, resp, true)
	if se := (*ServiceError)(nil); errors.Is(err, nats.ErrNoResponders) ||
		errors.As(err, &se) && se.Code == 404 && strings.Contains(se.Description, "unknown operation") {
		return a.call(subj.get, req, resp, true)
	}
	return err
}

// holds reports whether a GetCapacity request reports a lease held.
func holds(req *allotpb.GetCapacityRequest) bool {
	for _, r := range req.GetResource() {
		if r.GetHas() != nil {
			return true
		}
	}
	return false
}

// release sends ReleaseCapacity for ids (sorted and made unique here), in
// as many requests as the coordinator's limits need, one after the other.
// It returns the first error.
func (a *Agent) release(ids []string) error {
	slices.Sort(ids)
	ids = slices.Compact(ids)
	a.mu.Lock()
	n := a.nparts
	a.mu.Unlock()
	var firstErr error
	for part, idx := range partitionGroups(ids, n) {
		own := make([]string, len(idx))
		for j, i := range idx {
			own[j] = ids[i]
		}
		for _, p := range a.batches(len(own), func(i int) int { return fieldSize(len(own[i])) }) {
			req := &allotpb.ReleaseCapacityRequest{ClientId: a.o.clientID, ResourceId: own[p[0]:p[1]]}
			firstErr = cmp.Or(firstErr, a.call(a.subjects(part, n).release, req, &allotpb.ReleaseCapacityResponse{}, true))
		}
	}
	return firstErr
}

// Close closes all limiters and gauges (waiters return ErrClosed, Allow
// reports false), stops refreshing, and gives every lease back with
// ReleaseCapacity (in several requests beyond 1,000 resources, the most a
// coordinator takes in one). A GetCapacity already in flight is not
// abandoned: Close waits for its answer or its timeout before releasing,
// so the release cannot reach the coordinator first and leave it a lease
// nobody holds. Close returns the release error, if any; the agent is
// closed either way. Close is idempotent; it must not be called from an
// OnChange function.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closed = true
		var ids []string
		for id, r := range a.res {
			if r.sent {
				ids = append(ids, id)
			}
			r.shutLocked()
		}
		a.mu.Unlock()
		close(a.stop)
		<-a.done // the loop ends after the exchange it is in
		a.mu.Lock()
		rels := a.releases
		a.releases = nil
		a.mu.Unlock()
		for _, rel := range rels {
			ids = append(ids, rel.id)
		}
		if len(ids) > 0 && !a.nc.IsClosed() {
			a.closeErr = a.release(ids)
		}
		for _, rel := range rels {
			rel.done <- a.closeErr
		}
	})
	return a.closeErr
}
