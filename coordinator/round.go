package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// sweepInterval is how often idle resources drop expired leases.
const sweepInterval = time.Second

// takeOver reads what the predecessor left and writes the record under
// our term before serving. Its compare-and-set proves the read was the
// latest record; on a conflict it reads again.
func (c *Coordinator) takeOver(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		prior, err := c.store.load(ctx)
		if err != nil {
			return err
		}
		now := c.now().UnixNano()
		forged := c.ledger.Stats().ForgedRecords
		prop, err := c.ledger.Start(now, prior)
		if errors.Is(err, ledger.ErrNewerLeader) {
			return fmt.Errorf("coordinator: lease record of node %s has term %d, above ours (%d): a newer leader exists",
				c.opts.Node, prior.Record.GetTerm(), c.Term())
		}
		if c.ledger.Stats().ForgedRecords > forged {
			c.log.Error("lease record has a term no leader can hold: ignored, learning as after an unknown predecessor",
				"record_term", prior.Record.GetTerm(), "term_bound", prior.TermBound)
		}
		err = c.store.writeTakeover(ctx, prop.Record)
		c.ledger.Commit(now, prop, err)
		if err == nil {
			return nil
		}
		if attempt == 2 || !isMismatch(err) {
			return fmt.Errorf("coordinator: take over lease record: %w", err)
		}
	}
}

// loop runs allocation rounds until Stop.
func (c *Coordinator) loop() {
	defer close(c.done)
	sweep := time.NewTicker(sweepInterval)
	defer sweep.Stop()
	timer := time.NewTimer(0)
	<-timer.C
	retry := time.NewTimer(0)
	<-retry.C
	// A child node asks its parent every refresh interval the parent
	// gave, and at once for a resource it has no lease of yet.
	upTick := time.NewTimer(0)
	var upOut chan upstreamResult
	if c.up != nil {
		upOut = c.up.out
	} else {
		upTick.Stop()
	}
	var last time.Time
	for {
		select {
		case <-c.stop:
			c.runRound()
			c.answerWaiting()
			return
		case <-sweep.C:
			c.sweep()
		case q := <-c.snap.q:
			c.snapshot(q)
		case res := <-c.store.out:
			c.stored(res)
			c.runRound()
		case <-retry.C:
			c.runRound()
		case <-upTick.C:
			c.askParent()
			upTick.Reset(c.ledger.UpstreamRefresh())
		case res := <-upOut:
			c.answered(res)
			c.runRound()
		case <-c.urge:
			last = time.Now()
			c.runRound()
		case <-c.wake:
			// Let the round interval fill up before answering, unless a
			// child node's request comes.
			if wait := c.round - time.Since(last); c.round > 0 && wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-c.urge:
					timer.Stop()
				case <-c.stop:
					timer.Stop()
					c.runRound()
					c.answerWaiting()
					return
				}
			}
			last = time.Now()
			c.runRound()
		}
		if c.ledger.Pending() {
			// Resources wait for a record write: run a round when they
			// have waited long enough, even if nothing else happens.
			retry.Reset(c.ledger.MaxRecordWait() / 2)
		}
	}
}

// stored takes the writer's report.
func (c *Coordinator) stored(res storeResult) {
	now := c.now().UnixNano()
	if res.p != nil {
		c.ledger.Commit(now, res.p, res.err)
	}
	switch {
	case errors.Is(res.err, errDeposed):
		c.gate.Fail(res.err)
	case res.err != nil && res.p != nil:
		c.log.Error("cannot record the lease record; grants are held to the recorded ceilings and leases cut to the recorded horizon", "err", res.err)
	case res.err != nil:
		c.log.Warn("cannot check the lease record", "err", res.err)
	}
	if res.p != nil {
		c.writes.note(res.took)
	}
	if res.foreign {
		c.stats.foreignRecords++
	}
	if res.rewrite {
		c.ledger.Rewrite()
		c.propose(c.ledger.Sweep(now))
	}
	if res.p != nil && !c.ledger.Pending() {
		// Raises asked for while this write was out (early ones: see
		// ledger.Propose) go out now, not at the next request, which may
		// be a refresh interval away: they are what keeps the recorded
		// expiries ahead of steady holders' leases. (With resources
		// waiting, the round run next builds the record.)
		c.propose(c.ledger.Propose(now))
	}
}

// propose hands a proposal to the writer.
func (c *Coordinator) propose(p *ledger.Proposal) {
	if p != nil {
		c.writes.out = c.now()
		c.store.submit(p)
	}
}

// runRound takes the queued requests (takeBatch) and works them in
// passes: the holders' (and child nodes'), answered before any
// newcomer's is even applied, then the newcomers'. Each pass applies its
// requests to the ledger, lets the ledger allocate what needs no new
// record, and answers every request whose resources were allocated; the
// others wait for the record. The newcomers' work that is not their
// requests' own is done in passes of its own after theirs: settling what
// waited for the last write (allocating it, answering its requests), and
// building the next record, which costs every resource of the node. A
// holder's refresh that queues meanwhile goes first between these
// passes, so it waits at most for one of them, never for their sum.
func (c *Coordinator) runRound() {
	holders, newcomers, full := c.takeBatch()
	if len(holders) == 0 && len(newcomers) == 0 && len(c.waiting) == 0 && !c.ledger.Pending() {
		return
	}
	write := false
	if len(holders) > 0 {
		_, write = c.pass(holders, passOwn)
	}
	var took time.Duration
	if len(newcomers) > 0 {
		var w bool
		took, w = c.pass(newcomers, passOwn)
		write = c.holdersFirst() || w || write
	}
	if c.ledger.Pending() {
		t, w := c.pass(nil, passSettle)
		took = max(took, t)
		write = c.holdersFirst() || w || write
	}
	if write {
		c.pass(nil, passRecord)
	}
	if len(newcomers) > 0 {
		c.adapt(took, full)
	}
}

// holdersFirst runs a pass of the holders' requests queued now, if any,
// ahead of the newcomers queued before them (as takeBatch does); it
// reports whether the pass wants a record written.
func (c *Coordinator) holdersFirst() bool {
	holders := c.takeHolders()
	if len(holders) == 0 {
		return false
	}
	_, write := c.pass(holders, passOwn)
	return write
}

// What a pass decides beside its requests (see runRound).
type passKind uint8

const (
	// passOwn decides only the resources its requests name; those that
	// need a record wait, and the record is left to a passRecord.
	passOwn passKind = iota
	// passSettle also decides the resources that waited for a record
	// since an earlier pass: those the last write covers are allocated.
	passSettle
	// passRecord settles as well, and builds the record wanted.
	passRecord
)

// pass is one pass of a round over batch (see runRound); it returns how
// long it took and whether a record is wanted that it did not build.
func (c *Coordinator) pass(batch []*request, kind passKind) (time.Duration, bool) {
	start := time.Now()
	// A request whose sender has stopped waiting is dropped unanswered:
	// answering it would only cost the others' time.
	live := batch[:0]
	for _, req := range batch {
		if leader.Expired(req.msg, start) {
			c.stats.expired++
			leader.Finish(req.msg)
			c.recycle(req)
			continue
		}
		live = append(live, req)
	}
	clear(batch[len(live):])
	batch = live
	now := c.now().UnixNano()
	set := c.templateSet()
	c.ledger.Prefetch(len(batch), func(i int) (ledger.Claimant, *allotpb.GetCapacityRequest) {
		if req := batch[i]; req.kind == kindGet {
			return req.who, req.get
		}
		return ledger.Claimant{}, nil
	})
	for _, req := range batch {
		switch req.kind {
		case kindGet:
			slots, err := c.ledger.GetInto(req.slotBuf, now, set, req.who, req.get)
			req.slots = slots
			if err != nil {
				req.errCode, req.errText = int(slots[0].Code), slots[0].Err
			}
		case kindRelease:
			req.released = c.ledger.ReleaseAs(now, req.who, req.rel.GetClientId(), req.rel.GetResourceId())
		case kindServer:
			slots, err := c.ledger.ServerGet(now, set, req.srv)
			req.sslots = slots
			if err != nil {
				req.errCode, req.errText = int(slots[0].Code), slots[0].Err
			}
		}
	}
	var write bool
	if kind == passRecord {
		c.propose(c.ledger.Propose(now))
	} else {
		write = c.ledger.Defer(now, kind == passSettle)
	}
	if c.up != nil {
		switch c.ledger.UpstreamWanted(now) {
		case ledger.AskNow:
			c.askParent() // a new resource
		case ledger.AskSoon:
			// Demand or holdings moved, or the lease is short: ask now,
			// but at most eight times per regular interval.
			if c.now().Sub(c.up.lastAsk) >= c.ledger.UpstreamRefresh()/8 {
				c.askParent()
			}
		}
	}
	c.ledger.Allocate(now)

	// Answer, in arrival order, whatever is allocated.
	term := c.Term()
	var kept []*request
	for _, list := range [][]*request{c.waiting, batch} {
		for _, req := range list {
			if req.errCode == 0 && (req.kind == kindGet && !ledger.Ready(req.slots) || req.kind == kindServer && !ledger.ReadyServer(req.sslots)) {
				kept = append(kept, req)
				continue
			}
			c.answer(req, now, term)
			c.recycle(req)
		}
	}
	c.waiting = kept
	c.ledger.EndRound()
	took := time.Since(start)
	c.stats.round(len(batch), took)
	c.publishStats()
	return took, write
}

// Newcomers per round, counted in resources named (a request of 1,000
// resources costs a round what 1,000 of one do). A newcomers' pass is
// what a holder's refresh queued behind it waits, so under a flood each
// round takes at most c.newcomers resources of newcomers' requests (and
// at least one request), a figure that halves after a pass longer than
// roundBudget and grows by a quarter after a full one within it: passes
// stay short on a slow or busy machine, and the flood is worked off over
// several rounds.
const (
	roundBudget  = 50 * time.Millisecond
	minNewcomers = 64
	maxNewcomers = 8192
)

// adapt sets the newcomers' share of the next round from the last
// newcomers' pass: it took took, with full true if newcomers were left
// queued.
func (c *Coordinator) adapt(took time.Duration, full bool) {
	switch {
	case took > roundBudget:
		c.newcomers = max(minNewcomers, c.newcomers/2)
	case full:
		c.newcomers = min(maxNewcomers, c.newcomers+c.newcomers/4+1)
	}
}

// weight is what a request costs a round: the resources it names.
func (r *request) weight() int {
	switch {
	case r.get != nil:
		return max(1, len(r.get.GetResource()))
	case r.rel != nil:
		return max(1, len(r.rel.GetResourceId()))
	}
	return 1
}

// takeBatch takes the queued requests for a round: every holder's and
// child node's, and newcomers' in order up to c.newcomers resources (at
// least one request); the others stay queued, in order, for the next
// round, which it asks for. full says some were left.
func (c *Coordinator) takeBatch() (holders, newcomers []*request, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The lists are reused from round to round: the queue swaps with the
	// one taken last time, and holders and newcomers are the round
	// loop's, which is done with the last round's.
	all := c.pending
	c.pending = c.spare[:0]
	defer func() { clear(all); c.spare = all[:0] }()
	holders, newcomers = c.holdersBuf[:0], c.newcomersBuf[:0]
	defer func() { c.holdersBuf, c.newcomersBuf = holders, newcomers }()
	var rest []*request
	budget := c.newcomers
	for _, r := range all {
		switch {
		case !r.newcomer():
			holders = append(holders, r)
		case c.closed || len(rest) == 0 && (len(newcomers) == 0 || r.weight() <= budget):
			newcomers = append(newcomers, r)
			budget -= r.weight()
		default:
			rest = append(rest, r)
		}
	}
	if len(rest) > 0 {
		c.pending = rest
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return holders, newcomers, len(rest) > 0
}

// takeHolders takes the holders' and child nodes' requests queued now,
// leaving the newcomers' queued in order.
func (c *Coordinator) takeHolders() []*request {
	c.mu.Lock()
	defer c.mu.Unlock()
	holders := c.firstBuf[:0]
	rest := c.pending[:0]
	for _, r := range c.pending {
		if r.newcomer() {
			rest = append(rest, r)
		} else {
			holders = append(holders, r)
		}
	}
	clear(c.pending[len(rest):])
	c.pending = rest
	c.firstBuf = holders
	return holders
}

// answerWaiting answers requests still waiting for a record at stop,
// within what is recorded.
func (c *Coordinator) answerWaiting() {
	c.ledger.Abandon()
	for i := 0; i < 3 && (c.ledger.Pending() || len(c.waiting) > 0); i++ {
		c.runRound()
	}
}

func (c *Coordinator) answer(req *request, now int64, term uint64) {
	switch {
	case req.errCode != 0:
		c.roundError(req.msg, req.enc, req.errCode, req.errText)
	case req.kind == kindGet:
		c.replyLeases(req, now, term)
	case req.kind == kindServer:
		c.reply(req.msg, req.enc, c.serverResponse(req, now, term))
	default:
		c.reply(req.msg, req.enc, &allotpb.ReleaseCapacityResponse{Released: req.released, Term: term})
	}
}

func (c *Coordinator) publishStats() {
	ls := c.ledger.Stats()
	if n := ls.OverClaims - c.stats.ledger.OverClaims; n > 0 {
		c.log.Warn("clients reported holding more than the lease record allows: reports capped (a lying or broken client)",
			"reports", n, "total", ls.OverClaims)
	}
	c.stats.ledger = ls
	if c.up != nil {
		c.stats.parentOK, c.stats.parentErr = c.up.lastOK, c.up.lastErr
	}
	c.mu.Lock()
	c.statsSnap = c.stats
	c.mu.Unlock()
}

// replyLeases answers a GetCapacity request on the fast path: the reply
// is encoded straight from the state into a buffer reused across replies
// (the NATS client copies it on publish), in the request's encoding.
func (c *Coordinator) replyLeases(req *request, now int64, term uint64) {
	entries := c.leaseBuf[:0]
	for k, s := range req.slots {
		if !s.Served() {
			entries = append(entries, wire.LeaseReply{ResourceID: req.get.GetResource()[k].GetResourceId(), Error: s.Err, ErrorCode: s.Code})
			continue
		}
		l := s.Lease(now)
		entries = append(entries, wire.LeaseReply{
			ResourceID: l.ResourceID, Capacity: l.Capacity, Expiry: l.Expiry,
			Refresh: l.Refresh, SafeCapacity: l.SafeCapacity, SafeExpiry: l.SafeExpiry, Shadow: l.Shadow || c.opts.Shadow,
		})
	}
	c.leaseBuf = entries
	c.held(req, entries)
	// One message for every such reply: publishing copies it out.
	c.replyMsg = nats.Msg{Subject: req.msg.Reply(), Header: c.pbHeader}
	if req.enc == wire.Protobuf {
		c.replyBuf = wire.AppendGetCapacityResponse(c.replyBuf[:0], term, entries)
	} else {
		var ok bool
		if c.replyBuf, ok = wire.AppendGetCapacityResponseJSON(c.replyBuf[:0], term, entries); !ok {
			// A string protojson will not write: its error is the answer.
			c.reply(req.msg, req.enc, c.getResponse(req, now, term))
			return
		}
		if c.jsonHeader == nil {
			c.jsonHeader = nats.Header{wire.HeaderContentType: {wire.ContentJSON}}
			c.partitionsHeader(&nats.Msg{Header: c.jsonHeader})
		}
		c.replyMsg.Header = c.jsonHeader
	}
	c.replyMsg.Data = c.replyBuf
	c.publish(req.msg, &c.replyMsg)
}

// getResponse builds the reply message for the JSON path, for Marshal to
// report what the hand encoder would not write.
func (c *Coordinator) getResponse(req *request, now int64, term uint64) *allotpb.GetCapacityResponse {
	resp := &allotpb.GetCapacityResponse{Term: term, Response: make([]*allotpb.ResourceResponse, len(req.slots))}
	for k, s := range req.slots {
		if !s.Served() {
			resp.Response[k] = &allotpb.ResourceResponse{ResourceId: req.get.GetResource()[k].GetResourceId(), Error: s.Err, ErrorCode: s.Code}
			continue
		}
		l := s.Lease(now)
		resp.Response[k] = &allotpb.ResourceResponse{ResourceId: l.ResourceID, Gets: leaseMsg(l), SafeCapacity: l.SafeCapacity,
			SafeExpiryTime: safeExpiryMsg(l), Shadow: l.Shadow || c.opts.Shadow}
		c.known.hold(req.msg.Subject(), req.get.GetClientId(), l.Expiry)
	}
	return resp
}

// held records the client of a binary get as a holder until its last
// lease ends (see holders).
func (c *Coordinator) held(req *request, entries []wire.LeaseReply) {
	var until int64
	for _, e := range entries {
		if e.Error == "" {
			until = max(until, e.Expiry)
		}
	}
	if until > 0 {
		c.known.hold(req.msg.Subject(), req.get.GetClientId(), until)
	}
}

// safeExpiryMsg is the wire form of a lease's floor's end (nil: none).
func safeExpiryMsg(l ledger.Lease) *timestamppb.Timestamp {
	if l.SafeExpiry == 0 {
		return nil
	}
	return timestamppb.New(time.Unix(0, l.SafeExpiry))
}

// leaseMsg is the wire form of a ledger lease.
func leaseMsg(l ledger.Lease) *allotpb.Lease {
	return &allotpb.Lease{
		Capacity:        l.Capacity,
		ExpiryTime:      timestamppb.New(time.Unix(0, l.Expiry)),
		RefreshInterval: durationpb.New(l.Refresh),
	}
}

// serverResponse builds the reply to a child node. A resource this node
// refuses (no template, a limit) gets a lease of nothing, and the reason
// is logged: the child serves nothing of it.
func (c *Coordinator) serverResponse(req *request, now int64, term uint64) *allotpb.GetServerCapacityResponse {
	resp := &allotpb.GetServerCapacityResponse{Term: term, Response: make([]*allotpb.ServerCapacityResourceResponse, len(req.sslots))}
	for k, s := range req.sslots {
		if !s.Served() {
			c.log.Warn("child node asks for a resource this node refuses", "child", req.srv.GetServerId(), "err", s.Err)
			resp.Response[k] = &allotpb.ServerCapacityResourceResponse{ResourceId: req.srv.GetResource()[k].GetResourceId(),
				Gets: leaseMsg(ledger.Lease{Expiry: now, Refresh: time.Second})}
			continue
		}
		l := s.Lease(now)
		resp.Response[k] = &allotpb.ServerCapacityResourceResponse{ResourceId: l.ResourceID, Gets: leaseMsg(l), SafeCapacity: l.SafeCapacity,
			SafeExpiryTime: safeExpiryMsg(l), Pace: durationpb.New(l.Pace)}
	}
	return resp
}

// sweep drops expired leases of idle resources, forgets idle resources
// and lowers ceilings (writing the record if that changed it).
func (c *Coordinator) sweep() {
	now := c.now().UnixNano()
	c.propose(c.ledger.Sweep(now))
	c.known.sweep(now)
	c.logEvents()
	c.logCuts()
	c.stats.top = c.ledger.Top(now, topResources)
	for i := range c.stats.top {
		c.stats.top[i].Shadow = c.stats.top[i].Shadow || c.opts.Shadow
	}
	c.observeGauges(now)
	c.publishStats()
}

// logEvents logs what the ledger noticed of its child nodes: one whose
// lease ended unrefreshed (it runs on its floor, if it is alive), one
// whose floor ended (no longer counted). Clients are only counted
// (STATS unheard).
func (c *Coordinator) logEvents() {
	for _, e := range c.ledger.Events() {
		switch e.Kind {
		case ledger.EventUnheard:
			c.log.Warn("child node unheard: its lease ended unrefreshed; counting its floor until it ends",
				"child", e.Claimant, "resource", e.Resource, "floor", e.Floor, "floor_until", time.Unix(0, e.FloorUntil).UTC())
		case ledger.EventForgotten:
			c.log.Warn("child node no longer counted: its floor ended (or it released)", "child", e.Claimant, "resource", e.Resource)
		}
	}
}

// topResources bounds the resources listed in STATS.
const topResources = 50

// cutLogInterval is how often, at most, leases cut short to the lease
// record are logged.
const cutLogInterval = 10 * time.Second

// writeTimes keeps how long lease-record writes take, for the log line
// of cut leases.
type writeTimes struct {
	// slowest since window began (the last line, or cutLogInterval
	// before), and the last.
	slowest, last time.Duration
	window        time.Time
	out           time.Time // when the write in flight went to the writer
}

func (w *writeTimes) note(took time.Duration) {
	w.last, w.slowest = took, max(w.slowest, took)
}

// logCuts logs, at most once per cutLogInterval, that leases were cut
// short to the lease record (STATS cut_leases counts them): its writes
// do not keep up, because they are slow or fail, and clients get shorter
// leases, or zero-length ones on their floors, until one lands.
func (c *Coordinator) logCuts() {
	w := &c.writes
	now := c.now()
	if now.Sub(w.window) < cutLogInterval {
		return
	}
	if cut := c.ledger.TakeCut(); cut.Leases > 0 {
		attrs := []any{"leases", cut.Leases, "resource", cut.Resource, "cut_by", cut.By,
			"slowest_write", w.slowest, "last_write", w.last}
		if c.ledger.Inflight() {
			attrs = append(attrs, "write_out_for", now.Sub(w.out))
		}
		c.log.Warn("leases cut short to the lease record: its writes do not keep up", attrs...)
	}
	w.window, w.slowest = now, w.last
}
