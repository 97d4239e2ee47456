package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Defaults of the quota options.
const (
	// DefaultQuotaTimeout is how long Take waits for the quota service
	// before it decides locally: decisions are answered at once, so an
	// answer this late means the service is down or overloaded.
	DefaultQuotaTimeout = 250 * time.Millisecond
	// DefaultQuotaFailures is how many consecutive unanswered requests
	// for a namespace open its circuit.
	DefaultQuotaFailures = 3
	// DefaultQuotaCooldown is how long an open circuit stays open before
	// one request probes the service again.
	DefaultQuotaCooldown = 5 * time.Second
	// DefaultQuotaReportInterval is how long reports are gathered before
	// they are sent.
	DefaultQuotaReportInterval = 100 * time.Millisecond
	// QuotaFallbackWait is the longest wait a local fallback bucket
	// answers with (a request's own max wait can lower it): quotaservice's
	// default wait_timeout.
	QuotaFallbackWait = time.Second
	// AnyNamespace in WithQuotaFallback configures one fallback bucket
	// shared by every namespace that has none of its own.
	AnyNamespace = "*"
)

const (
	// maxQuotaNamespaces bounds the per-namespace circuit state; beyond it
	// a namespace is still decided, without a circuit of its own.
	maxQuotaNamespaces = 1024
	// maxPendingReports bounds the buckets gathered between two report
	// flushes; reaching it flushes at once.
	maxPendingReports = 4096
)

// ErrQuotaUnavailable is returned by Take, wrapped with the cause, when the
// quota service did not answer (or its circuit is open) and the bucket's
// namespace has no fallback bucket (WithQuotaFallback). Take fails closed:
// a caller that prefers to fail open checks errors.Is(err,
// ErrQuotaUnavailable) and proceeds.
var ErrQuotaUnavailable = errors.New("agent: quota service unavailable")

// QuotaResult is a granted Take.
type QuotaResult struct {
	// Bucket is the bucket that answered, after the service's lookup
	// (a namespace's default bucket answers for names it does not list);
	// the bucket asked for when the fallback answered.
	Bucket string
	// Wait is how long Take waited before returning, as the decision
	// said (OK_WAIT); zero for OK.
	Wait time.Duration
	// Limit is the bucket's size (bucket algorithms) or its limit per
	// window (window algorithms); the fallback's burst when local.
	Limit int64
	// Remaining is the tokens left after this decision.
	Remaining int64
	// Warning is "soft_limit" once the bucket is past its soft limit.
	Warning string
	// Fallback reports that the local fallback bucket decided, because
	// the quota service did not answer or its circuit is open.
	Fallback bool
	// Shadow reports that the bucket is in shadow mode: the service
	// answered OK whatever the bucket decided. WouldRefuse is set when
	// it decided otherwise (REJECTED, with ShadowReason, or OK_WAIT).
	Shadow       bool
	WouldRefuse  bool
	ShadowReason string
}

// QuotaError is a REJECTED decision: Take returns it (use errors.As) when
// the bucket refused the tokens. Nothing was taken.
type QuotaError struct {
	// Bucket is the bucket asked for.
	Bucket string
	// Reason is why: "timeout" (the wait would exceed the bucket's
	// wait_timeout or the request's max wait), "no_bucket",
	// "too_many_buckets", "too_many_tokens", "banned" or "reserved"
	// (capacity kept for CRITICAL requests).
	Reason string
	// RetryAfter is when asking again can succeed; zero when unknown.
	RetryAfter time.Duration
	// Limit and Remaining describe the bucket, as in QuotaResult.
	Limit     int64
	Remaining int64
	// Fallback reports that the local fallback bucket refused.
	Fallback bool
}

func (e *QuotaError) Error() string {
	by := "quota service"
	if e.Fallback {
		by = "local fallback"
	}
	s := fmt.Sprintf("agent: %s rejected %q: %s", by, e.Bucket, e.Reason)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return s
}

// A TakeOption configures one Take.
type TakeOption func(*takeOptions) error

type takeOptions struct {
	maxWait    time.Duration
	hasMaxWait bool
	sheddable  bool
}

// WithMaxWait sets the longest wait this Take accepts: the bucket answers
// REJECTED "timeout" rather than OK_WAIT beyond it. It lowers the bucket's
// wait_timeout, never raises it; 0 means now or REJECTED. A context
// deadline lowers it too. It is also a DomainOption: how long Request,
// Reserve and AcquireAll retry rejections (the Charon paper's max_wait).
func WithMaxWait(d time.Duration) TakeOption {
	return func(o *takeOptions) error {
		if d < 0 {
			return fmt.Errorf("agent: max wait %v is negative", d)
		}
		o.maxWait, o.hasMaxWait = d, true
		return nil
	}
}

// Sheddable marks the request SHEDDABLE: a bucket that reserves part of
// its capacity for CRITICAL requests (the default) refuses it first.
func Sheddable() TakeOption {
	return func(o *takeOptions) error {
		o.sheddable = true
		return nil
	}
}

// quotaFallback configures a local fallback bucket.
type quotaFallback struct {
	rate  float64
	burst int
}

// quotaState is the agent's quota side: circuits per namespace, the
// fallback buckets and the reports waiting to be sent. Its mutex is its
// own, so decisions never contend with the lease loop.
type quotaState struct {
	mu       sync.Mutex
	ns       map[string]*quotaNS
	fallback map[string]*RateLimiter // set in New, read-only after
	pending  map[string]int64
	closed   bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// quotaNS is one namespace's circuit. Guarded by quotaState.mu.
type quotaNS struct {
	name      string
	failures  int       // consecutive unanswered requests
	openUntil time.Time // zero while the circuit is closed
	probing   bool      // one request is probing an open circuit
	lastOK    time.Time
	lastErr   error
	shadow    quotaShadow // shadow-mode answers (shadow.go)
}

func (a *Agent) initQuota() {
	q := &a.q
	q.ns = make(map[string]*quotaNS)
	q.fallback = make(map[string]*RateLimiter, len(a.o.quotaFallback))
	for ns, f := range a.o.quotaFallback {
		l := newRateLimiter(a.o.clock, f.burst)
		l.setLimit(rate.Limit(f.rate))
		l.tokens = float64(f.burst) // start full, as quotaservice's buckets do
		q.fallback[ns] = l
	}
	q.pending = make(map[string]int64)
	q.kick = make(chan struct{}, 1)
	q.stop = make(chan struct{})
	q.done = make(chan struct{})
	go a.reportLoop()
}

// splitBucket checks "namespace:name" as the quota service does.
func splitBucket(bucket string) (ns, name string, err error) {
	ns, name, err = wire.SplitBucket(bucket)
	if err != nil {
		return "", "", fmt.Errorf("agent: %w", err)
	}
	return ns, name, nil
}

// Take asks the quota service for n tokens of bucket ("namespace:name")
// and returns when the caller may proceed. n = 0 peeks: it consumes
// nothing and reports what is left.
//
// The request goes to allot.<node>.quota.take.<namespace>.<name> (binary
// protobuf), a subject a NATS server can partition over coordinator groups.
// The answer is one of:
//
//   - OK: Take returns at once.
//   - OK_WAIT: the tokens are taken and Take waits the answered wait
//     before it returns. If ctx ends first, Take returns ctx.Err(); the
//     tokens stay taken, as the service cannot tell an abandoned wait.
//   - REJECTED: Take returns a *QuotaError with the reason and when to
//     retry. Nothing is taken.
//
// A context deadline bounds the wait the service may answer with, like
// WithMaxWait, so that a wait the caller could not honour is REJECTED
// "timeout" instead.
//
// When the service does not answer within the quota timeout
// (WithQuotaTimeout), answers with a server error, or is not reachable,
// the namespace's local fallback bucket decides (WithQuotaFallback) and
// the result says Fallback; without one Take returns an error wrapping
// ErrQuotaUnavailable. After WithQuotaCircuit's number of consecutive
// failures for a namespace Take stops asking for it during the cooldown
// and decides locally at once; then one request probes the service, and
// its answer closes the circuit again. Status shows each namespace's
// circuit. A malformed bucket, a negative n or an error reply for the
// request itself (the service answered, e.g. 400) is returned as an error
// and is not a failure of the service.
func (a *Agent) Take(ctx context.Context, bucket string, n int64, opts ...TakeOption) (QuotaResult, error) {
	ns, name, err := splitBucket(bucket)
	if err != nil {
		return QuotaResult{}, err
	}
	if n < 0 {
		return QuotaResult{}, fmt.Errorf("agent: take %d tokens of %q: tokens must not be negative", n, bucket)
	}
	var to takeOptions
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&to); err != nil {
			return QuotaResult{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return QuotaResult{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		if left := max(time.Until(dl), 0); !to.hasMaxWait || left < to.maxWait {
			to.maxWait, to.hasMaxWait = left, true
		}
	}
	st, ask, err := a.q.admit(ns, now(a.o.clock))
	if err != nil {
		return QuotaResult{}, err
	}
	cause := errCircuitOpen
	if ask {
		res, err := a.askQuota(ctx, bucket, ns, name, n, &to)
		var se *ServiceError
		var qe *QuotaError
		switch {
		case err == nil:
			a.q.answered(a, st, now(a.o.clock))
			a.q.noteShadow(st, res, n)
			return a.proceed(ctx, res)
		case errors.As(err, &qe):
			a.q.answered(a, st, now(a.o.clock)) // REJECTED is an answer
			return QuotaResult{}, err
		case ctx.Err() != nil:
			a.q.abandoned(st)
			return QuotaResult{}, ctx.Err()
		case errors.As(err, &se) && se.Code < 500:
			a.q.answered(a, st, now(a.o.clock)) // it answered: the request is at fault
			return QuotaResult{}, err
		}
		a.q.failed(a, st, err, now(a.o.clock))
		cause = err
	}
	return a.takeLocal(ctx, bucket, ns, n, &to, cause)
}

// errCircuitOpen is the cause of a local decision taken without asking.
var errCircuitOpen = errors.New("circuit open after repeated failures")

// askQuota sends one QuotaTakeRequest and turns the answer into a result
// to wait for or a *QuotaError.
func (a *Agent) askQuota(ctx context.Context, bucket, ns, name string, n int64, to *takeOptions) (QuotaResult, error) {
	req := &allotpb.QuotaTakeRequest{Bucket: bucket, Tokens: &n, ClientId: a.o.clientID}
	if to.hasMaxWait {
		req.MaxWait = durationpb.New(to.maxWait)
	}
	if to.sheddable {
		req.Criticality = allotpb.Criticality_SHEDDABLE
	}
	var resp allotpb.QuotaTakeResponse
	subj := a.quotaSubj + ".take." + ns + "." + name
	if err := a.request(ctx, a.o.quotaTimeout, subj, req, &resp); err != nil {
		return QuotaResult{}, err
	}
	res := QuotaResult{
		Bucket: cmp.Or(resp.GetMatched(), bucket), Wait: resp.GetWait().AsDuration(),
		Limit: resp.GetLimit(), Remaining: resp.GetRemaining(), Warning: resp.GetWarning(),
	}
	if resp.GetShadow() {
		res.Shadow, res.ShadowReason = true, resp.GetReason()
		res.WouldRefuse = resp.GetShadowStatus() != allotpb.QuotaTakeResponse_OK
	}
	switch resp.GetStatus() {
	case allotpb.QuotaTakeResponse_OK:
		res.Wait = 0
		return res, nil
	case allotpb.QuotaTakeResponse_OK_WAIT:
		res.Wait = max(res.Wait, 0)
		return res, nil
	case allotpb.QuotaTakeResponse_REJECTED:
		return QuotaResult{}, &QuotaError{
			Bucket: bucket, Reason: resp.GetReason(), RetryAfter: max(resp.GetRetryAfter().AsDuration(), 0),
			Limit: resp.GetLimit(), Remaining: resp.GetRemaining(),
		}
	}
	return QuotaResult{}, fmt.Errorf("agent: reply from %s: unknown status %v", subj, resp.GetStatus())
}

// proceed waits res.Wait, or until ctx ends.
func (a *Agent) proceed(ctx context.Context, res QuotaResult) (QuotaResult, error) {
	if res.Wait <= 0 {
		return res, nil
	}
	c, stop := newTimer(a.o.clock, res.Wait)
	defer stop()
	select {
	case <-c:
		return res, nil
	case <-ctx.Done():
		return QuotaResult{}, ctx.Err()
	}
}

// takeLocal decides with the namespace's fallback bucket.
func (a *Agent) takeLocal(ctx context.Context, bucket, ns string, n int64, to *takeOptions, cause error) (QuotaResult, error) {
	l := a.q.fallbackFor(ns)
	if l == nil {
		return QuotaResult{}, fmt.Errorf("%w for %q (no fallback for namespace %q): %w", ErrQuotaUnavailable, bucket, ns, cause)
	}
	maxWait := QuotaFallbackWait
	if to.hasMaxWait {
		maxWait = min(maxWait, to.maxWait)
	}
	wait, left, burst, ok := l.reserveQuota(n, maxWait)
	res := QuotaResult{Bucket: bucket, Wait: wait, Limit: int64(burst), Remaining: max(int64(math.Floor(left)), 0), Fallback: true}
	if !ok {
		qe := &QuotaError{Bucket: bucket, Reason: "too_many_tokens", Limit: res.Limit, Remaining: res.Remaining, Fallback: true}
		if n <= int64(burst) {
			qe.Reason, qe.RetryAfter = "timeout", wait-maxWait
		}
		return QuotaResult{}, qe
	}
	return a.proceed(ctx, res)
}

// reserveQuota takes n tokens now or ahead of time for a fallback
// decision, unless n exceeds the burst or the wait would exceed maxWait.
// It returns the wait (the wait it would have needed when refused), the
// tokens left and the burst. The limit never changes, so the wait is
// final: a reservation is not rescheduled like Wait's.
func (l *RateLimiter) reserveQuota(n int64, maxWait time.Duration) (time.Duration, float64, int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now(l.clock))
	if n > int64(l.burst) {
		return 0, l.tokens, l.burst, false
	}
	f := float64(n)
	if n == 0 || l.tokens >= f { // a peek never waits, even in debt
		l.tokens -= f
		return 0, l.tokens, l.burst, true
	}
	wait := durationFromTokens(l.limit, f-l.tokens)
	if wait > maxWait {
		return wait, l.tokens, l.burst, false
	}
	l.tokens -= f
	return wait, l.tokens, l.burst, true
}

// charge takes n tokens after the fact, into debt if need be, for a
// report made while the fallback decides. The debt is bounded at a
// QuotaFallbackWait's worth beyond the burst so a burst of reports cannot
// block the fallback for long.
func (l *RateLimiter) charge(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now(l.clock))
	floor := -float64(l.limit) * QuotaFallbackWait.Seconds()
	l.tokens = max(l.tokens-float64(n), floor)
}

func (q *quotaState) fallbackFor(ns string) *RateLimiter {
	if l, ok := q.fallback[ns]; ok {
		return l
	}
	return q.fallback[AnyNamespace]
}

// admit returns ns's circuit (nil beyond maxQuotaNamespaces) and whether
// to ask the service: not while the circuit is open, except for one probe
// once the cooldown is over.
func (q *quotaState) admit(ns string, t time.Time) (*quotaNS, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, false, ErrClosed
	}
	st := q.ns[ns]
	if st == nil {
		if len(q.ns) >= maxQuotaNamespaces {
			return nil, true, nil
		}
		st = &quotaNS{name: ns}
		q.ns[ns] = st
	}
	switch {
	case st.openUntil.IsZero():
		return st, true, nil
	case t.Before(st.openUntil) || st.probing:
		return st, false, nil
	}
	st.probing = true
	return st, true, nil
}

// answered closes st's circuit: the service answered.
func (q *quotaState) answered(a *Agent, st *quotaNS, t time.Time) {
	if st == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !st.openUntil.IsZero() {
		a.log.Info("allot: quota service answers again; circuit closed", "namespace", st.name)
	}
	st.failures, st.openUntil, st.probing = 0, time.Time{}, false
	st.lastOK, st.lastErr = t, nil
}

// abandoned ends a probe whose caller gave up before the answer.
func (q *quotaState) abandoned(st *quotaNS) {
	if st == nil {
		return
	}
	q.mu.Lock()
	st.probing = false
	q.mu.Unlock()
}

// failed counts a failure and opens st's circuit at the threshold, or
// again when a probe failed.
func (q *quotaState) failed(a *Agent, st *quotaNS, err error, t time.Time) {
	if st == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	st.failures++
	st.lastErr = err
	wasOpen := !st.openUntil.IsZero()
	if wasOpen || st.failures >= a.o.quotaFailures {
		st.openUntil = t.Add(a.o.quotaCooldown)
		if !wasOpen {
			a.log.Warn("allot: quota service not answering; circuit open, deciding locally",
				"namespace", st.name, "failures", st.failures, "cooldown", a.o.quotaCooldown, "error", err)
		}
	}
	st.probing = false
}

// quotaStatusLocked describes every namespace asked for, ordered by name.
func (a *Agent) quotaStatus() []Status {
	q := &a.q
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]Status, 0, len(q.ns))
	for _, st := range q.ns {
		s := Status{
			ResourceID: st.name, Kind: KindQuota, Source: SourceQuotaService, Mode: a.o.mode,
			LastRefresh: st.lastOK, LastError: st.lastErr,
			QuotaFailures: st.failures, CircuitOpen: !st.openUntil.IsZero(), CircuitRetry: st.openUntil,
			Shadow: st.shadow.last, ShadowAdmitted: st.shadow.admitted, WouldRefuse: st.shadow.would,
		}
		if s.CircuitOpen {
			s.Source = SourceFallback
		}
		if l := q.fallbackFor(st.name); l != nil {
			s.Capacity = float64(l.Limit())
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y Status) int { return cmp.Compare(x.ResourceID, y.ResourceID) })
	return out
}

// Report charges n tokens of bucket after the fact (quotaservice's
// post-accounting): for work whose cost is known only once done. It never
// blocks and is never rejected: reports are summed per bucket and sent in
// the background every WithQuotaReportInterval as a QuotaReportBatch to
// allot.<node>.quota.report.<namespace>.<name>, and on Close. They are
// published without a reply, so a report made while the service is down
// is lost; while a namespace's circuit is open its fallback bucket is
// charged as well. A malformed bucket or a negative n is an error and
// changes nothing; n = 0 does nothing.
func (a *Agent) Report(bucket string, n int64) error {
	ns, _, err := splitBucket(bucket)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("agent: report %d tokens of %q: tokens must not be negative", n, bucket)
	}
	if n == 0 {
		return nil
	}
	q := &a.q
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	open := false
	if st := q.ns[ns]; st != nil {
		open = !st.openUntil.IsZero()
	}
	old := q.pending[bucket]
	q.pending[bucket] = old + min(n, math.MaxInt64-old) // saturate
	full := len(q.pending) >= maxPendingReports
	q.mu.Unlock()
	if open {
		if l := q.fallbackFor(ns); l != nil {
			l.charge(n)
		}
	}
	if full {
		a.flushReports() // bounded memory: send now rather than grow
		return nil
	}
	select {
	case q.kick <- struct{}{}:
	default:
	}
	return nil
}

// reportLoop sends the reports gathered, at most one flush per interval.
func (a *Agent) reportLoop() {
	q := &a.q
	defer close(q.done)
	for {
		select {
		case <-q.stop:
			return
		case <-q.kick:
		}
		c, stop := newTimer(a.o.clock, a.o.quotaReportInterval)
		select {
		case <-q.stop:
			stop()
			return
		case <-c:
		}
		a.flushReports()
	}
}

// flushReports publishes the pending reports, one message per bucket so
// that each reaches the partition that owns the bucket, and returns how
// many buckets it sent.
func (a *Agent) flushReports() int {
	q := &a.q
	q.mu.Lock()
	pending := q.pending
	if len(pending) == 0 {
		q.mu.Unlock()
		return 0
	}
	q.pending = make(map[string]int64)
	q.mu.Unlock()
	var firstErr error
	failed := 0
	for bucket, n := range pending {
		ns, name, _ := strings.Cut(bucket, ":")
		b := &allotpb.QuotaReportBatch{ClientId: a.o.clientID, Reports: []*allotpb.QuotaReport{{Bucket: bucket, Tokens: n}}}
		data, err := wire.Marshal(wire.Protobuf, b)
		if err == nil {
			msg := nats.NewMsg(a.quotaSubj + ".report." + ns + "." + name)
			msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
			msg.Data = data
			err = a.nc.PublishMsg(msg)
		}
		if err != nil {
			failed++
			firstErr = cmp.Or(firstErr, err)
		}
	}
	if firstErr != nil {
		a.log.Warn("allot: quota reports not sent", "buckets", failed, "error", firstErr)
	}
	return len(pending) - failed
}

// closeQuota stops the report loop, sends the reports still pending and
// flushes them to the server.
func (a *Agent) closeQuota() {
	q := &a.q
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	close(q.stop)
	<-q.done
	if a.nc.IsClosed() || a.flushReports() == 0 {
		return
	}
	if err := a.nc.FlushTimeout(a.o.requestTimeout); err != nil {
		a.log.Warn("allot: flushing quota reports", "error", err)
	}
}
