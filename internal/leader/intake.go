package leader

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	limits "github.com/allot/allot/intake"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/time/rate"

	"github.com/allot/allot/internal/wire"
)

// Headers of the intake's contract (subjects.md, "Overload"; see wire).
const (
	HeaderTimeout    = wire.HeaderTimeout
	HeaderClient     = wire.HeaderClient
	HeaderRetryAfter = wire.HeaderRetryAfter
)

// Intake refusal codes, in the Nats-Service-Error-Code header.
const (
	CodeTooLarge    = 413
	CodeTooMany     = 429
	CodeUnavailable = 503
)

// Defaults of Limits: the public intake package's.
const (
	DefaultMaxInFlight  = limits.DefaultMaxInFlight
	DefaultMaxAge       = limits.DefaultMaxAge
	DefaultRetryAfter   = limits.DefaultRetryAfter
	DefaultPendingBytes = limits.DefaultPendingBytes
	DefaultPendingMsgs  = limits.DefaultPendingMsgs
	// maxAnnouncedTimeout bounds HeaderTimeout.
	maxAnnouncedTimeout = time.Hour
	// maxTenantLimiters bounds the per-tenant limiters kept; past it
	// they start afresh (tenants are accounts, configured, few).
	maxTenantLimiters = 10000
)

// Limits bound a term's intake, so that past what it can answer in time
// a service refuses at once rather than queueing what nobody waits for.
// It is the public intake.Limits, which the servers' Options take.
type Limits = limits.Limits

// Class orders the requests a term has taken up.
type Class uint8

// Classes, lowest priority first.
const (
	// ClassNewcomer is any request not known to come from a holder.
	ClassNewcomer Class = iota
	// ClassKnown is a request of a client the service knows holds a
	// lease: it goes first.
	ClassKnown
)

// IntakeStats counts what the intake did besides handing requests over:
// the public intake.Stats.
type IntakeStats = limits.Stats

// intake is a term's admission state, shared by its endpoints.
type intake struct {
	lim      Limits
	inFlight atomic.Int64

	refused, limited, tooLarge, expired, errors atomic.Uint64

	mu      sync.Mutex
	tenants map[string]*rate.Limiter
	// refusals are made once each (see refusal).
	refusals map[bodyKey]refusal
	// flying counts each tenant's newcomers in flight: no tenant holds
	// more than half of the newcomers' places (acquireTenant).
	flying map[string]int
}

// acquireTenant takes a newcomer's place in flight for tenant, if it
// holds fewer than half of them: a tenant's burst within its rate, held
// up in a slow round, must leave places to the other tenants.
func (in *intake) acquireTenant(tenant string) bool {
	limit := max(1, (in.lim.MaxInFlight-in.lim.Reserve)/2)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.flying[tenant] >= limit {
		return false
	}
	if in.flying == nil {
		in.flying = make(map[string]int)
	}
	in.flying[tenant]++
	return true
}

// releaseTenant gives back a place acquireTenant took.
func (in *intake) releaseTenant(tenant string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.flying[tenant] <= 1 {
		delete(in.flying, tenant)
		return
	}
	in.flying[tenant]--
}

// acquire takes a place in flight for a request of class c.
func (in *intake) acquire(c Class) bool {
	limit := int64(in.lim.MaxInFlight)
	if c == ClassNewcomer {
		limit -= int64(in.lim.Reserve)
	}
	if in.inFlight.Add(1) > limit {
		in.inFlight.Add(-1)
		return false
	}
	return true
}

// tenantDelay counts a request of tenant and returns 0, or how long the
// tenant must wait before its rate admits another.
func (in *intake) tenantDelay(tenant string, now time.Time) time.Duration {
	if in.lim.TenantRate <= 0 || tenant == "" {
		return 0
	}
	in.mu.Lock()
	l := in.tenants[tenant]
	if l == nil {
		if len(in.tenants) >= maxTenantLimiters {
			clear(in.tenants)
		}
		l = rate.NewLimiter(rate.Limit(in.lim.TenantRate), in.lim.TenantBurst)
		in.tenants[tenant] = l
	}
	in.mu.Unlock()
	r := l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	return 0
}

// retryAfter is the wait told in a 503: RetryAfter ± a quarter, in
// eight steps (so that the refusals can be kept, see refusal).
func (in *intake) retryAfter() time.Duration {
	d := in.lim.RetryAfter
	return d - d/4 + time.Duration(rand.N(8))*(d/2)/7
}

// bodyKey identifies a refusal: the product's error body depends on the
// request's Content-Type only.
type bodyKey struct {
	contentType string
	code        int
	retry       time.Duration
}

// refusal is a refusal's headers (shared, never modified: nats.go only
// reads them) and body.
type refusal struct {
	header nats.Header
	body   []byte
}

// maxRefusals bounds the refusals kept.
const maxRefusals = 256

// refusal returns the refusal of key, made by mk once: under a flood
// most requests are refused alike.
func (in *intake) refusal(key bodyKey, mk func() refusal) refusal {
	in.mu.Lock()
	defer in.mu.Unlock()
	if r, ok := in.refusals[key]; ok {
		return r
	}
	if len(in.refusals) >= maxRefusals {
		clear(in.refusals)
	}
	r := mk()
	in.refusals[key] = r
	return r
}

func (in *intake) stats() IntakeStats {
	return IntakeStats{InFlight: in.inFlight.Load(), Refused: in.refused.Load(), Limited: in.limited.Load(),
		TooLarge: in.tooLarge.Load(), Expired: in.expired.Load(), Errors: in.errors.Load()}
}

// headers are the values of the headers the intake and the products'
// handlers read from every request ("" when absent).
type headers struct {
	contentType, client, timeout string
}

// readHeaders reads h's Content-Type, HeaderClient and HeaderTimeout
// once for the intake and the handler after it (Request.ContentType,
// Request.Client), skipping the lookups of what h cannot hold: most
// requests carry a Content-Type only, and every lookup in a header map
// costs as much as a short request's validation.
func readHeaders(h nats.Header) headers {
	var hd headers
	n := len(h) // the headers not yet found
	if n > 0 {
		hd.contentType, n = lookup(h, wire.HeaderContentType, n)
	}
	if n > 0 {
		hd.client, n = lookup(h, HeaderClient, n)
	}
	if n > 0 {
		hd.timeout, _ = lookup(h, HeaderTimeout, n)
	}
	return hd
}

// lookup returns the first value of h's key and n less one if h has it.
func lookup(h nats.Header, key string, n int) (string, int) {
	v, ok := h[key]
	if !ok {
		return "", n
	}
	if len(v) == 0 {
		return "", n - 1
	}
	return v[0], n - 1
}

// timeoutOf is the time-out v (a HeaderTimeout value) announces, or max.
func timeoutOf(v string, max time.Duration) time.Duration {
	if v == "" {
		return max
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return max
	}
	return min(time.Duration(ms)*time.Millisecond, maxAnnouncedTimeout)
}

// Request is a request the intake took up, as an endpoint's handler gets
// it: a micro.Request answered on the term's connection (after the
// intake's own handler has returned, so never through micro's request,
// whose bookkeeping would race), with its deadline.
type Request struct {
	t       *Term
	nc      *nats.Conn // the connection it came on, which answers it
	subject string
	reply   string
	header  nats.Header
	data    []byte
	msg     *nats.Msg // a plain endpoint's message
	class   Class
	// contentType and client are its Content-Type and HeaderClient, as
	// the intake read them (readHeaders).
	contentType, client string
	// tenant is set when the request holds one of its tenant's places
	// for newcomers (intake.acquireTenant).
	tenant   string
	deadline time.Time
	finished atomic.Bool
	// kept is the product's, across Release (see Keep).
	kept any
}

var _ micro.Request = (*Request)(nil)

// Respond sends data as the reply.
func (r *Request) Respond(data []byte, opts ...micro.RespondOpt) error {
	return r.send(&nats.Msg{Data: data}, opts)
}

// RespondJSON sends v in JSON as the reply.
func (r *Request) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return r.Respond(b, opts...)
}

// Error sends an error reply with micro's error headers.
func (r *Request) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" || description == "" {
		return fmt.Errorf("%w: error code and description", micro.ErrArgRequired)
	}
	r.t.in.errors.Add(1)
	return r.send(&nats.Msg{Header: nats.Header{micro.ErrorHeader: {description}, micro.ErrorCodeHeader: {code}}, Data: data}, opts)
}

func (r *Request) send(m *nats.Msg, opts []micro.RespondOpt) error {
	if r.reply == "" {
		return fmt.Errorf("%w: no reply subject", micro.ErrRespond)
	}
	for _, o := range opts {
		o(m)
	}
	m.Subject = r.reply
	if err := r.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("%w: %w", micro.ErrRespond, err)
	}
	return nil
}

// RespondMsg sends m as the reply, on the connection the request came on
// (a server that permits responses only to the requests a connection
// received, allow_responses, wants that). Unlike micro's requests it may
// be called after the handler has returned.
func (r *Request) RespondMsg(m *nats.Msg) error { return r.send(m, nil) }

// ContentType returns the request's Content-Type header ("" if none),
// read once by the intake.
func (r *Request) ContentType() string { return r.contentType }

// Client returns the client the request's HeaderClient names ("" if
// none), read once by the intake.
func (r *Request) Client() string { return r.client }

// Data returns the request's payload.
func (r *Request) Data() []byte { return r.data }

// Headers returns the request's headers.
func (r *Request) Headers() micro.Headers { return micro.Headers(r.header) }

// Subject returns the subject the request arrived on.
func (r *Request) Subject() string { return r.subject }

// Reply returns the request's reply subject.
func (r *Request) Reply() string { return r.reply }

// Deadline is when the request's sender stops waiting for its answer,
// as the intake counts it: from when it took the request up.
func (r *Request) Deadline() time.Time { return r.deadline }

// Class is the request's class.
func (r *Request) Class() Class { return r.class }

// Msg is the message of a request of a plain endpoint, else nil.
func (r *Request) Msg() *nats.Msg { return r.msg }

// Finish gives the request's place in flight back; only the first call
// counts. The intake finishes a request when its handler returns, unless
// its endpoint is Deferred: then whoever answers it (or drops it) must.
func (r *Request) Finish() {
	if r.finished.CompareAndSwap(false, true) {
		r.t.in.inFlight.Add(-1)
		if r.tenant != "" {
			r.t.in.releaseTenant(r.tenant)
		}
	}
}

// Finish finishes m if the intake took it up (see Request.Finish).
func Finish(m micro.Request) {
	if r, ok := m.(*Request); ok {
		r.Finish()
	}
}

// Release finishes m if the intake took it up and gives it back for a
// later request to reuse: a Deferred endpoint's product calls it once it
// is done with m, after which nothing may use m or what it returned
// (its headers and data belong to the message it came in). Releasing
// is optional; an unreleased request is left to the garbage collector.
func Release(m micro.Request) {
	r, ok := m.(*Request)
	if !ok {
		return
	}
	r.Finish()
	t, kept := r.t, r.kept
	*r = Request{t: t, kept: kept}
	t.reqs.Put(r)
}

// Keep stores v with r until r is dropped: it comes back from Kept
// when a released r serves a later request. A product keeps its own
// per-request state there, made once per request object instead of once
// per request; the product must be done with v when it releases r.
func (r *Request) Keep(v any) { r.kept = v }

// Kept returns what Keep stored with r, or nil.
func (r *Request) Kept() any { return r.kept }

// DeadlineOf returns m's deadline if the intake took it up, else the
// zero time.
func DeadlineOf(m micro.Request) time.Time {
	if r, ok := m.(*Request); ok {
		return r.deadline
	}
	return time.Time{}
}

// Expired reports whether m's sender has stopped waiting at now.
func Expired(m micro.Request, now time.Time) bool {
	d := DeadlineOf(m)
	return !d.IsZero() && now.After(d)
}

// lane holds one endpoint's requests between the intake and the handler,
// known clients' first, each class in arrival order, and runs the
// handler on a goroutine of its own.
type lane struct {
	t    *Term
	ep   Endpoint
	nc   *nats.Conn // the endpoint's connection
	mu   sync.Mutex
	q    [2][]*Request // by Class
	wake chan struct{}
}

func (l *lane) push(r *Request) {
	l.mu.Lock()
	l.q[r.class] = append(l.q[r.class], r)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lane) pop() *Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := ClassKnown; ; c-- {
		if q := l.q[c]; len(q) > 0 {
			r := q[0]
			q[0] = nil
			l.q[c] = q[1:]
			if len(l.q[c]) == 0 {
				l.q[c] = nil
			}
			return r
		}
		if c == ClassNewcomer {
			return nil
		}
	}
}

// run hands the lane's requests to the handler until the term quits,
// dropping those whose sender has gone.
func (l *lane) run(quit <-chan struct{}) {
	t := l.t
	for {
		r := l.pop()
		if r == nil {
			select {
			case <-l.wake:
				continue
			case <-quit:
				for r := l.pop(); r != nil; r = l.pop() {
					t.gate.Silenced.Add(1)
					r.Finish()
					t.handled.Add(1)
				}
				return
			}
		}
		switch {
		case t.gate.Closed():
			t.gate.Silenced.Add(1)
			r.Finish()
		case t.spec.Now().After(r.deadline):
			t.in.expired.Add(1)
			r.Finish()
		default:
			l.ep.Handle(r)
			if !l.ep.Deferred {
				r.Finish()
			}
		}
		t.handled.Add(1)
	}
}
