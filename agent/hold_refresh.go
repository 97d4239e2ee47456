package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"sync"
	"time"

	"github.com/allot/allot/internal/domainwire"
)

// Keeping holds alive: the refresh loop, and the release of every hold on
// Close.

// refreshLoop refreshes every resource's holds when due, each resource in
// one message with all its holds (or a few: refreshBatches).
func (a *Agent) refreshLoop() {
	defer close(a.d.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		t := now(a.o.clock)
		wake := t.Add(time.Minute)
		a.d.mu.Lock()
		for _, r := range a.d.res {
			if len(r.holds) == 0 || r.inFlight {
				continue
			}
			if !t.Before(r.next) {
				r.inFlight = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					a.refreshRes(r)
				}()
				continue
			}
			if r.next.Before(wake) {
				wake = r.next
			}
		}
		a.d.mu.Unlock()
		c, stop := newTimer(a.o.clock, max(wake.Sub(t), time.Millisecond))
		select {
		case <-a.d.stop:
			stop()
			return
		case <-a.d.kick:
			stop()
		case <-c:
		}
	}
}

// refreshRes sends r's holds to the service and marks lost those it no
// longer has. On failure it tries again sooner: the holds live on at the
// service for a ttl, and a new leader learns them from these refreshes.
func (a *Agent) refreshRes(r *domainRes) {
	r.ops.Lock()
	a.d.mu.Lock()
	holds := make([]*Hold, 0, len(r.holds))
	for _, h := range r.holds {
		holds = append(holds, h)
	}
	ttl := r.ttl
	a.d.mu.Unlock()
	var lost []string
	var failed error
	listed := make([]domainwire.Hold, 0, len(holds))
	for _, h := range holds {
		if c, seal := h.listing(); c > 0 {
			listed = append(listed, domainwire.Hold{HoldID: h.id, Domain: h.domain, Groups: h.groups, Copies: c, Seal: seal})
		}
	}
	seals := map[string]string{}
	maxBytes := int(min(int64(domainwire.MaxPayload), a.nc.MaxPayload())) - refreshSlack
	for _, batch := range refreshBatches(a.o.clientID, listed, maxBytes) {
		req := domainwire.Refresh{ClientID: a.o.clientID, Holds: batch}
		ctx, cancel := context.WithTimeout(context.Background(), a.o.domain.timeout)
		var rep domainwire.RefreshReply
		err := a.domainCall(ctx, domainwire.OpRefresh, r.ns, r.res, &req, &rep)
		cancel()
		if err != nil {
			failed = err
			continue
		}
		lost = append(lost, rep.Lost...)
		maps.Copy(seals, rep.Seals)
		if rep.TTLMillis > 0 {
			ttl = time.Duration(rep.TTLMillis) * time.Millisecond
		}
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
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	r.inFlight = false
	r.ttl = ttl
	next := ttl / 3
	if failed != nil {
		next /= 2
		a.unanswered(r, failed)
	} else {
		a.answered(r)
	}
	r.next = now(a.o.clock).Add(next)
	select {
	case a.d.kick <- struct{}{}:
	default:
	}
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
// (the holds it lists would expire). A hold larger than maxBytes on its
// own goes alone.
func refreshBatches(clientID string, holds []domainwire.Hold, maxBytes int) [][]domainwire.Hold {
	base := jsonLen(domainwire.Refresh{ClientID: clientID, Holds: []domainwire.Hold{}})
	var out [][]domainwire.Hold
	start, size := 0, base
	for i, h := range holds {
		n := jsonLen(h) + 1 // and a comma
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

// jsonLen is the length of v in JSON.
func jsonLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0 // not for the types above
	}
	return len(b)
}

// closeDomain stops the refresh loop and gives back every hold the agent
// still has, in parallel and within twice the domain timeout; what could
// not be given back expires at the service within its ttl.
func (a *Agent) closeDomain() {
	a.d.mu.Lock()
	if a.d.closed {
		a.d.mu.Unlock()
		return
	}
	a.d.closed = true
	started := a.d.started
	var holds []*Hold
	for _, r := range a.d.res {
		for _, h := range r.holds {
			holds = append(holds, h)
		}
	}
	a.d.mu.Unlock()
	if started {
		close(a.d.stop)
		<-a.d.done
	}
	if len(holds) == 0 || a.nc.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*a.o.domain.timeout)
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
		a.log.Warn("allot: domain holds not released on close; they expire at the service within their ttl", "holds", failed, "error", firstErr)
	}
}
