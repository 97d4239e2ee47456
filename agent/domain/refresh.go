package domain

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/internal/domainwire"
)

// Keeping holds alive: the refresh loop, and the release of every hold on
// Close.

// refreshLoop refreshes every resource's holds when due, each resource in
// one message with all its holds (or a few: refreshBatches).
func (c *Client) refreshLoop() {
	defer close(c.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		t := clock.Now(c.clock)
		wake := t.Add(time.Minute)
		c.mu.Lock()
		for _, r := range c.res {
			if len(r.holds) == 0 || r.inFlight {
				continue
			}
			if !t.Before(r.next) {
				r.inFlight = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.refreshRes(r)
				}()
				continue
			}
			if r.next.Before(wake) {
				wake = r.next
			}
		}
		c.mu.Unlock()
		timerC, stop := clock.NewTimer(c.clock, max(wake.Sub(t), time.Millisecond))
		select {
		case <-c.stop:
			stop()
			return
		case <-c.kick:
			stop()
		case <-timerC:
		}
	}
}

// refreshRes sends r's holds to the service and marks lost those it no
// longer has. On failure it tries again sooner: the holds live on at the
// service for a ttl, and a new leader learns them from these refreshes.
func (c *Client) refreshRes(r *domainRes) {
	r.ops.Lock()
	c.mu.Lock()
	holds := make([]*Hold, 0, len(r.holds))
	for _, h := range r.holds {
		holds = append(holds, h)
	}
	ttl := r.ttl
	c.mu.Unlock()
	var lost []string
	var failed error
	listed := make([]domainwire.Hold, 0, len(holds))
	for _, h := range holds {
		if c, seal := h.listing(); c > 0 {
			listed = append(listed, domainwire.Hold{HoldID: h.id, Domain: h.domain, Groups: h.groups, Copies: c, Seal: seal})
		}
	}
	seals := map[string]string{}
	var replies []refreshReply
	maxBytes := int(min(int64(domainwire.MaxPayload), c.nc.MaxPayload())) - refreshSlack
	for _, batch := range refreshBatches(c.clientID, listed, maxBytes) {
		req := domainwire.Refresh{ClientID: c.clientID, Holds: batch}
		ctx, cancel := context.WithTimeout(context.Background(), c.o.timeout)
		at := clock.Now(c.clock)
		var rep domainwire.RefreshReply
		err := c.call(ctx, domainwire.OpRefresh, r.ns, r.res, &req, &rep)
		cancel()
		if err != nil {
			failed = err
			continue
		}
		lost = append(lost, rep.Lost...)
		maps.Copy(seals, rep.Seals)
		if rep.TTLMillis > 0 {
			ttl = fromMillis(rep.TTLMillis, domainwire.MaxHoldTTL)
		}
		replies = append(replies, refreshReply{rep.Fail, rep.Shares, at})
	}
	r.ops.Unlock()
	byID := make(map[string]*Hold, len(holds))
	for _, h := range holds {
		byID[h.id] = h
	}
	for id, seal := range seals {
		if h := byID[id]; h != nil {
			h.setSeal(seal)
		}
	}
	for _, id := range lost {
		if h := byID[id]; h != nil {
			h.markLost("the service no longer has it: it expired without a refresh, or a new leader could not adopt it")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r.inFlight = false
	r.ttl = ttl
	for _, rep := range replies {
		c.learnMode(r.ns, rep.fail)
		for d, sh := range rep.shares {
			r.learnShare(d, &sh, rep.at)
		}
	}
	next := ttl / 3
	if failed != nil {
		next /= 2
		c.unanswered(r, failed)
	} else {
		c.answered(r)
	}
	r.next = clock.Now(c.clock).Add(next)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// refreshReply is what a refresh reply tells of the fail mode and the
// shares, and when its request was sent.
type refreshReply struct {
	fail   string
	shares map[string]domainwire.Share
	at     time.Time
}

// listing returns what a refresh lists of h: the copies it has (0 once
// closed or lost) and its seal.
func (h *Hold) listing() (int64, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost || h.closed {
		return 0, ""
	}
	return h.copies, h.seal
}

// setSeal keeps the seal a refresh answered for h.
func (h *Hold) setSeal(seal string) {
	h.mu.Lock()
	h.seal = seal
	h.mu.Unlock()
}

// refreshSlack is room left in a refresh message for what NATS adds to
// the payload it counts against max_payload (headers, if any).
const refreshSlack = 1024

// refreshBatches splits the holds of one refresh into messages of at most
// holdsPerRefresh holds and maxBytes of JSON each, so that long domain
// and group names cannot make a refresh exceed the server's max_payload
// (the holds it lists would expire), nor its reply, which has a seal and a
// share for each (without room for them, the service leaves the shares
// out). A hold larger than maxBytes on its own goes alone.
func refreshBatches(clientID string, holds []domainwire.Hold, maxBytes int) [][]domainwire.Hold {
	base := max(jsonLen(domainwire.Refresh{ClientID: clientID, Holds: []domainwire.Hold{}}), replyBase)
	var out [][]domainwire.Hold
	start, size := 0, base
	for i, h := range holds {
		n := max(jsonLen(h), replyLen(h)) + 1 // and a comma
		if i > start && (i-start == holdsPerRefresh || size+n > maxBytes) {
			out = append(out, holds[start:i])
			start, size = i, base
		}
		size += n
	}
	if start < len(holds) {
		out = append(out, holds[start:])
	}
	return out
}

// replyBase bounds what a refresh reply has beside its holds' seals and
// shares.
const replyBase = 128

// replyLen bounds what a refresh reply says of h: its seal (a new one
// may have a few more digits) and its domain's share, with its groups
// (the domain's groups now, most likely the hold's) at the largest
// numbers.
func replyLen(h domainwire.Hold) int {
	share := domainwire.Share{Domain: -domainwire.MaxCopies, Global: -domainwire.MaxCopies}
	for _, g := range h.Groups {
		share.Groups = append(share.Groups, domainwire.GroupShare{Name: g, Share: -domainwire.MaxCopies})
	}
	return jsonLen(h.HoldID) + jsonLen(h.Seal) + 16 + jsonLen(h.Domain) + jsonLen(share) + 2
}

// jsonLen is the length of v in JSON.
func jsonLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0 // not for the types above
	}
	return len(b)
}

// Close stops the refresh loop and gives back every hold the client still
// has (Reserve, Seize), in parallel and within twice the timeout; what
// could not be given back expires at the service within its ttl, and
// Close returns an error that says how many. Request, Reserve, Seize and
// AcquireAll return agent.ErrClosed afterwards, and so do those sleeping
// between retries of a rejection, at once. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closing)
	started := c.started
	var holds []*Hold
	for _, r := range c.res {
		for _, h := range r.holds {
			holds = append(holds, h)
		}
	}
	c.mu.Unlock()
	if started {
		close(c.stop)
		<-c.done
	}
	if len(holds) == 0 || c.nc.IsClosed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.o.timeout)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var firstErr error
	sem := make(chan struct{}, 16)
	for _, h := range holds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := h.close(ctx); err != nil {
				mu.Lock()
				failed++
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		return fmt.Errorf("domain: %d holds not released on close; they expire at the service within their ttl: %w", failed, firstErr)
	}
	return nil
}
