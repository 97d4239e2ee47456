package domain

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/poll"
)

// fakeDomain is a scripted domain service for the agent's tests, answering
// on allot.root.domain.> as internal/domainwire says: rate resources with a
// plain count per domain (no time windows), copy resources with holds that
// expire ttl after their last refresh. The real server is tested against
// in domain_server_test.go.
type fakeDomain struct {
	t   *testing.T
	sub *nats.Subscription

	mu     sync.Mutex
	limits map[string]int64 // "ns:res" → limit per domain; rate: prefix "rate:"
	hits   map[string]int64 // "ns:res/domain" → hits
	holds  map[string]*fakeHold
	staged map[string]*fakeHold // transfer id → staged copies
	ttl    time.Duration
	// frozen, once set by freeze, is the service's clock, which then
	// moves only by outlive; zero: the real clock.
	frozen time.Time
	seq    int
	msgs   []fakeMsg
	// Scripts: silent drops requests (a timeout), fail answers 500,
	// rejectFirst rejects that many requests or reserves, learning
	// answers that many reserves with learning and retryAfter,
	// unanswered grants that many reserves but drops their replies (as a
	// reply that comes after the client's time-out).
	unanswered  int
	silent      bool
	fail        bool
	rejectFirst int
	learning    int
	retryAfter  time.Duration
	// ttlMillis and retryMillis, when set, are sent as they are instead
	// of ttl and retryAfter: a broken or hostile service's numbers.
	ttlMillis, retryMillis int64
}

type fakeHold struct {
	client, domain, res string
	copies              int64
	expires             time.Time
}

type fakeMsg struct {
	op, res string
	at      time.Time
	data    []byte
}

func newFakeDomain(t *testing.T, nc *nats.Conn, limits map[string]int64) *fakeDomain {
	t.Helper()
	f := &fakeDomain{t: t, limits: limits, hits: map[string]int64{}, holds: map[string]*fakeHold{}, staged: map[string]*fakeHold{}, ttl: 10 * time.Second}
	sub, err := nc.Subscribe("allot.root.domain.>", f.handle)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f.sub = sub
	return f
}

// ttlMillisLocked is the hold ttl the service tells.
func (f *fakeDomain) ttlMillisLocked() int64 {
	if f.ttlMillis != 0 {
		return f.ttlMillis
	}
	return f.ttl.Milliseconds()
}

func (f *fakeDomain) set(fn func(f *fakeDomain)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

// freeze stops the service's clock for holds and transfers: from now
// on it moves only by outlive, so that what expires is up to the test,
// not to the machine's speed.
func (f *fakeDomain) freeze() {
	f.set(func(f *fakeDomain) { f.frozen = time.Now() })
}

// nowLocked is the service's clock. Called with f.mu held.
func (f *fakeDomain) nowLocked() time.Time {
	if f.frozen.IsZero() {
		return time.Now()
	}
	return f.frozen
}

// outlive advances the frozen clock by steps of d, each once a refresh of
// every resource in res has been handled since the previous step: the
// holds the client keeps refreshing stay alive for steps*d of the
// service's time, those it does not refresh expire.
func (f *fakeDomain) outlive(t *testing.T, d time.Duration, steps int, res ...string) {
	t.Helper()
	for range steps {
		var seen map[string]int
		f.set(func(f *fakeDomain) { f.frozen, seen = f.frozen.Add(d), f.refreshesLocked() })
		poll.Until(t, 20*time.Second, fmt.Sprintf("refreshes of %v", res), func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			now := f.refreshesLocked()
			for _, r := range res {
				if now[r] <= seen[r] {
					return false
				}
			}
			return true
		})
	}
}

// refreshesLocked counts the refreshes received by resource.
func (f *fakeDomain) refreshesLocked() map[string]int {
	n := map[string]int{}
	for _, m := range f.msgs {
		if m.op == domainwire.OpRefresh {
			n[m.res]++
		}
	}
	return n
}

// received returns the messages received for op ("" for all).
func (f *fakeDomain) received(op string) []fakeMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeMsg
	for _, m := range f.msgs {
		if op == "" || m.op == op {
			out = append(out, m)
		}
	}
	return out
}

// held returns the copies of res held by all live holds.
func (f *fakeDomain) held(res string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked()
	return f.heldLocked(res)
}

func (f *fakeDomain) heldLocked(res string) int64 {
	var n int64
	for _, h := range f.holds {
		if h.res == res {
			n += h.copies
		}
	}
	for _, h := range f.staged {
		if h.res == res {
			n += h.copies
		}
	}
	return n
}

func (f *fakeDomain) expireLocked() {
	t := f.nowLocked()
	for id, h := range f.holds {
		if t.After(h.expires) {
			delete(f.holds, id)
		}
	}
}

func (f *fakeDomain) handle(m *nats.Msg) {
	op, ns, res, err := domainwire.ParseSubject(m.Subject)
	if err != nil {
		f.t.Errorf("fake domain: %v", err)
		return
	}
	name := ns + ":" + res
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, fakeMsg{op: op, res: name, at: time.Now(), data: m.Data})
	if f.silent {
		return
	}
	if f.fail {
		f.errorLocked(m, 500, "store down")
		return
	}
	f.expireLocked()
	limit, copyRes := f.limits[name]
	rateLimit, rateRes := f.limits["rate:"+name]
	switch op {
	case domainwire.OpRequest:
		var req domainwire.Request
		if err := decodeValid(m.Data, &req, req.Validate); err != nil {
			f.errorLocked(m, 400, err.Error())
			return
		}
		if !rateRes {
			f.errorLocked(m, 404, "unknown rate resource "+name)
			return
		}
		key := name + "/" + req.Domain
		rep := domainwire.RateReply{HardLimit: rateLimit, GlobalLimit: -1, DomainHitsLastSecond: f.hits[key]}
		n := min(req.Copies, rateLimit-f.hits[key])
		if f.rejectFirst > 0 {
			f.rejectFirst--
			n = 0
		}
		if n >= req.MinCopies {
			rep.Granted = n
			f.hits[key] += n
		} else {
			rep.HardLimited = true
		}
		f.respondLocked(m, rep)
	case domainwire.OpReserve:
		var req domainwire.Reserve
		if err := decodeValid(m.Data, &req, req.Validate); err != nil {
			f.errorLocked(m, 400, err.Error())
			return
		}
		if !copyRes {
			f.errorLocked(m, 404, "unknown copy resource "+name)
			return
		}
		rep := domainwire.ReserveReply{DomainLimit: limit, GlobalLimit: -1, TTLMillis: f.ttlMillisLocked(), Groups: []string{"g1"}}
		if f.learning > 0 {
			f.learning--
			rep.Learning, rep.RetryAfterMillis = true, f.retryAfter.Milliseconds()
			if f.retryMillis != 0 {
				rep.RetryAfterMillis = f.retryMillis
			}
			f.respondLocked(m, rep)
			return
		}
		n := min(req.Copies, limit-f.heldLocked(name))
		if f.rejectFirst > 0 {
			f.rejectFirst--
			n = 0
		}
		if n >= req.MinCopies {
			f.seq++
			id := "h" + strconv.Itoa(f.seq)
			f.holds[id] = &fakeHold{client: req.ClientID, domain: req.Domain, res: name, copies: n, expires: f.nowLocked().Add(f.ttl)}
			rep.Granted, rep.HoldID = n, id
		}
		if f.unanswered > 0 {
			f.unanswered--
			return
		}
		rep.DomainHolds = f.heldLocked(name)
		f.respondLocked(m, rep)
	case domainwire.OpRelease:
		var req domainwire.Release
		if err := decodeValid(m.Data, &req, req.Validate); err != nil {
			f.errorLocked(m, 400, err.Error())
			return
		}
		if h, _, ok := f.takeLocked(m, req.HoldID, req.ClientID, req.Copies); ok {
			f.respondLocked(m, domainwire.ReleaseReply{Remaining: h.copies})
		}
	case domainwire.OpRefresh:
		var req domainwire.Refresh
		if err := decodeValid(m.Data, &req, req.Validate); err != nil {
			f.errorLocked(m, 400, err.Error())
			return
		}
		rep := domainwire.RefreshReply{TTLMillis: f.ttlMillisLocked(), Lost: []string{}}
		for _, x := range req.Holds {
			h := f.holds[x.HoldID]
			if h == nil || h.client != req.ClientID {
				rep.Lost = append(rep.Lost, x.HoldID)
				continue
			}
			h.expires = f.nowLocked().Add(f.ttl)
			h.copies = min(h.copies, x.Copies) // a release it missed
		}
		f.respondLocked(m, rep)
	case domainwire.OpTransfer:
		var req domainwire.Transfer
		var ttl time.Duration
		err := domainwire.Decode(m.Data, &req)
		if err == nil {
			ttl, err = req.Validate()
		}
		if err != nil {
			f.errorLocked(m, 400, err.Error())
			return
		}
		h, n, ok := f.takeLocked(m, req.HoldID, req.ClientID, req.Copies)
		if !ok {
			return
		}
		f.seq++
		tid := ns + "." + res + ".t" + strconv.Itoa(f.seq)
		f.staged[tid] = &fakeHold{domain: h.domain, res: name, copies: n, expires: f.nowLocked().Add(ttl)}
		f.respondLocked(m, domainwire.TransferReply{TransferID: tid, Remaining: h.copies})
	case domainwire.OpSeize:
		var req domainwire.Seize
		if err := decodeValid(m.Data, &req, req.Validate); err != nil {
			f.errorLocked(m, 400, err.Error())
			return
		}
		s := f.staged[req.TransferID]
		if s == nil || f.nowLocked().After(s.expires) {
			f.errorLocked(m, 404, "unknown transfer "+req.TransferID)
			return
		}
		delete(f.staged, req.TransferID)
		f.seq++
		id := "h" + strconv.Itoa(f.seq)
		f.holds[id] = &fakeHold{client: req.ClientID, domain: s.domain, res: name, copies: s.copies, expires: f.nowLocked().Add(f.ttl)}
		f.respondLocked(m, domainwire.SeizeReply{HoldID: id, Namespace: ns, Resource: res, Domain: s.domain, Groups: []string{"g1"}, Copies: s.copies, TTLMillis: f.ttl.Milliseconds()})
	default:
		f.errorLocked(m, 400, "unknown op "+op)
	}
}

func decodeValid(data []byte, v any, validate func() error) error {
	if err := domainwire.Decode(data, v); err != nil {
		return err
	}
	return validate()
}

// takeLocked takes n copies (0: all) off client's hold id for a release
// or a transfer, or answers the error.
func (f *fakeDomain) takeLocked(m *nats.Msg, id, client string, n int64) (*fakeHold, int64, bool) {
	h := f.holds[id]
	if n == 0 && h != nil {
		n = h.copies
	}
	switch {
	case h == nil:
		f.errorLocked(m, 404, "unknown hold "+id)
		return nil, 0, false
	case h.client != client:
		f.errorLocked(m, 403, "hold "+id+" belongs to another client")
		return nil, 0, false
	case n > h.copies:
		f.errorLocked(m, 409, fmt.Sprintf("hold has %d copies, not %d", h.copies, n))
		return nil, 0, false
	}
	h.copies -= n
	if h.copies == 0 {
		delete(f.holds, id)
	}
	return h, n, true
}

func (f *fakeDomain) respondLocked(m *nats.Msg, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		f.t.Error(err)
		return
	}
	_ = m.Respond(data)
}

func (f *fakeDomain) errorLocked(m *nats.Msg, code int, text string) {
	data, _ := json.Marshal(domainwire.ErrorReply{Code: code, Error: text})
	_ = m.RespondMsg(&nats.Msg{Subject: m.Reply, Data: data, Header: nats.Header{
		micro.ErrorCodeHeader: {strconv.Itoa(code)}, micro.ErrorHeader: {text},
	}})
}
