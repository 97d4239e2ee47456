package quota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/agent/internal/option"
	"github.com/allot/allot/agent/internal/rpc"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// A Client asks the quota service for tokens on behalf of an Agent, with
// the agent's connection, client id, node and logger. It keeps a circuit
// per namespace, the local fallback buckets and the reports waiting to be
// sent; its lock is its own, so decisions never contend with the agent's
// leases. Methods are safe for concurrent use.
type Client struct {
	nc       *nats.Conn
	rpc      *rpc.Caller
	clientID string
	log      *slog.Logger
	clock    clock.Clock // the agent's; nil: package time
	subj     string      // allot.<node>.quota; Take and Report add the rest
	o        options

	mu       sync.Mutex
	ns       map[string]*namespace
	fallback map[string]*bucket // set in New, read-only after
	pending  map[string]int64
	closed   bool

	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// New returns a quota client on a's connection, which starts a goroutine
// that sends reports; Close stops it. Options are checked and the first
// invalid one is reported. The client lives apart from a: closing a
// leaves it working, so close it before the connection.
func New(a *agent.Agent, opts ...Option) (*Client, error) {
	if a == nil {
		return nil, errors.New("quota: nil agent")
	}
	o := options{timeout: DefaultTimeout, failures: DefaultFailures, cooldown: DefaultCooldown, reportInterval: DefaultReportInterval}
	if err := option.Apply(&o, opts); err != nil {
		return nil, err
	}
	c := &Client{
		nc:       a.Conn(),
		rpc:      rpc.New(a.Conn(), serviceError),
		clientID: a.ClientID(),
		log:      a.Logger().With("component", "allot-quota", "client_id", a.ClientID()),
		clock:    a.Clock(),
		subj:     subjects.QuotaPrefix(a.Node()),
		o:        o,
		ns:       make(map[string]*namespace),
		fallback: make(map[string]*bucket, len(o.fallback)),
		pending:  make(map[string]int64),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	t := clock.Now(c.clock)
	for ns, f := range o.fallback {
		c.fallback[ns] = newBucket(f, t)
	}
	go c.reportLoop()
	return c, nil
}

// Result is a granted Take.
type Result struct {
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

// splitBucket checks "namespace:name" as the quota service does.
func splitBucket(bucket string) (ns, name string, err error) {
	ns, name, err = wire.SplitBucket(bucket)
	if err != nil {
		return "", "", fmt.Errorf("quota: %w", err)
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
//   - REJECTED: Take returns a *RejectedError with the reason and when
//     to retry. Nothing is taken.
//
// A context deadline bounds the wait the service may answer with, like
// WithMaxWait, so that a wait the caller could not honour is REJECTED
// "timeout" instead ("no_wait" when no wait at all is allowed).
//
// When the service does not answer within the timeout (WithTimeout),
// answers with a server error, or is not reachable, the namespace's local
// fallback bucket decides (WithFallback) and the result says Fallback;
// without one Take returns an error wrapping ErrUnavailable. After
// WithCircuit's number of consecutive failures for a namespace Take stops
// asking for it during the cooldown and decides locally at once; then one
// request probes the service, and its answer closes the circuit again.
// Status shows each namespace's circuit. A malformed bucket, a negative n
// or one above 10^12 (the most a take asks for; nothing is sent), or an
// error reply for the request itself (the service answered, e.g. 400: a
// *agent.ServiceError) is returned as an error and is not a failure of
// the service. After Close, Take returns agent.ErrClosed.
func (c *Client) Take(ctx context.Context, bucket string, n int64, opts ...TakeOption) (Result, error) {
	ns, name, err := splitBucket(bucket)
	if err != nil {
		return Result{}, err
	}
	if n < 0 {
		return Result{}, fmt.Errorf("quota: take %d tokens of %q: tokens must not be negative", n, bucket)
	}
	if n > wire.MaxQuotaTokens {
		return Result{}, fmt.Errorf("quota: take %d tokens of %q: a take asks for at most %d", n, bucket, int64(wire.MaxQuotaTokens))
	}
	var to takeOptions
	if err := option.Apply(&to, opts); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		// A context's deadline passes on the real clock, not the agent's.
		// One beyond the longest wait a bucket can have bounds nothing,
		// and the service refuses a max_wait that long as a unit mistake.
		if left := max(time.Until(dl), 0); left <= wire.MaxQuotaWait && (!to.hasMaxWait || left < to.maxWait) {
			to.maxWait, to.hasMaxWait = left, true
		}
	}
	st, ask, err := c.admit(ns, clock.Now(c.clock))
	if err != nil {
		return Result{}, err
	}
	cause := errCircuitOpen
	if ask {
		res, err := c.ask(ctx, bucket, ns, name, n, &to)
		var se *agent.ServiceError
		switch {
		case err == nil:
			c.answered(st, clock.Now(c.clock))
			c.noteShadow(st, res, n)
			return c.proceed(ctx, res)
		case errors.Is(err, ErrRejected):
			c.answered(st, clock.Now(c.clock)) // REJECTED is an answer
			return Result{}, err
		case ctx.Err() != nil:
			c.abandoned(st)
			return Result{}, ctx.Err()
		case errors.As(err, &se) && se.Code < 500:
			c.answered(st, clock.Now(c.clock)) // it answered: the request is at fault
			return Result{}, err
		}
		c.failed(st, err, clock.Now(c.clock))
		cause = err
	}
	return c.takeLocal(ctx, bucket, ns, n, &to, cause)
}

// ask sends one QuotaTakeRequest and turns the answer into a result to
// wait for or a *RejectedError.
func (c *Client) ask(ctx context.Context, bucket, ns, name string, n int64, to *takeOptions) (Result, error) {
	req := &allotpb.QuotaTakeRequest{Bucket: bucket, Tokens: &n, ClientId: c.clientID}
	if to.hasMaxWait {
		req.MaxWait = durationpb.New(to.maxWait)
	}
	if to.sheddable {
		req.Criticality = allotpb.Criticality_SHEDDABLE
	}
	var resp allotpb.QuotaTakeResponse
	subj := c.subj + ".take." + ns + "." + name
	if err := c.rpc.Protobuf(ctx, c.o.timeout, subj, "", req, &resp); err != nil {
		return Result{}, err
	}
	res := Result{
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
		return Result{}, &RejectedError{
			Bucket: bucket, Reason: resp.GetReason(), RetryAfter: max(resp.GetRetryAfter().AsDuration(), 0),
			Limit: resp.GetLimit(), Remaining: resp.GetRemaining(),
		}
	}
	return Result{}, fmt.Errorf("quota: reply from %s: unknown status %v", subj, resp.GetStatus())
}

// proceed waits res.Wait on the client's clock, or until ctx ends.
func (c *Client) proceed(ctx context.Context, res Result) (Result, error) {
	if res.Wait <= 0 {
		return res, nil
	}
	timerC, stop := clock.NewTimer(c.clock, res.Wait)
	defer stop()
	select {
	case <-timerC:
		return res, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// takeLocal decides with the namespace's fallback bucket.
func (c *Client) takeLocal(ctx context.Context, bucket, ns string, n int64, to *takeOptions, cause error) (Result, error) {
	b := c.fallbackFor(ns)
	if b == nil {
		return Result{}, fmt.Errorf("%w for %q (no fallback for namespace %q): %w", ErrUnavailable, bucket, ns, cause)
	}
	maxWait := FallbackWait
	if to.hasMaxWait {
		maxWait = min(maxWait, to.maxWait)
	}
	wait, left, ok := b.reserve(clock.Now(c.clock), n, maxWait)
	res := Result{Bucket: bucket, Wait: wait, Limit: int64(b.burst), Remaining: max(int64(math.Floor(left)), 0), Fallback: true}
	if !ok {
		re := &RejectedError{Bucket: bucket, Reason: "too_many_tokens", Limit: res.Limit, Remaining: res.Remaining, Fallback: true}
		if n <= int64(b.burst) {
			re.Reason, re.RetryAfter = "timeout", wait-maxWait
			if maxWait == 0 {
				re.Reason = "no_wait"
			}
		}
		return Result{}, re
	}
	return c.proceed(ctx, res)
}

// fallbackFor returns ns's fallback bucket, the shared one, or nil.
func (c *Client) fallbackFor(ns string) *bucket {
	if b, ok := c.fallback[ns]; ok {
		return b
	}
	return c.fallback[AnyNamespace]
}

// Close stops the report loop, sends the reports still pending and
// flushes them to the server, returning the flush's error. Take and
// Report return agent.ErrClosed afterwards. Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.stop)
		<-c.done
		if c.nc.IsClosed() || c.flushReports() == 0 {
			return
		}
		if err := c.nc.FlushTimeout(flushTimeout); err != nil {
			c.closeErr = fmt.Errorf("quota: flushing reports: %w", err)
		}
	})
	return c.closeErr
}

// serviceError is the error of a service's error reply.
func serviceError(code int, desc string, retryAfter time.Duration) error {
	return &agent.ServiceError{Code: code, Description: desc, RetryAfter: retryAfter}
}
