package grpclimit

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/agent/internal/limittest"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/poll"
)

// serve starts a gRPC server with the health service on a random port,
// with opts, and returns a client connection to it with copts.
func serve(t *testing.T, opts []grpc.ServerOption, copts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, copts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// stoppedAgent is an agent serving tmpls whose clock stands still but when
// the test moves it: a limiter of 1/s earns no token between two calls,
// however long a loaded machine takes between them (on the real clock, a
// second did, and the call the test expected refused was admitted).
func stoppedAgent(t *testing.T, tmpls ...*config.Template) (*agent.Agent, *clocktest.Fake) {
	t.Helper()
	clk := clocktest.At(time.Now())
	return limittest.AgentWith(t, []agent.Option{agent.WithClock(clk)}, tmpls...), clk
}

// granted waits until id has a lease of want per second, then moves clk
// a second on so that id has earned a token.
func granted(t *testing.T, a *agent.Agent, clk *clocktest.Fake, id string, want float64) *agent.RateLimiter {
	t.Helper()
	lim, err := a.Rate(id, agent.WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, id+": no lease", func() bool { return lim.Status().Granted == want })
	clk.Advance(time.Second)
	if n := lim.Tokens(); n < 1 {
		t.Fatalf("%s: %v tokens a second into a lease of %g/s", id, n, want)
	}
	return lim
}

// driven runs call, moving clk on while it waits (for a token, on the
// clock that stands still otherwise), and returns its error.
func driven(clk *clocktest.Fake, call func() error) error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Millisecond):
			clk.Advance(50 * time.Millisecond)
		}
	}
}

// checkExhausted checks that err is ResourceExhausted with a RetryInfo
// of at most a second (the limiter earns 1 token per second).
func checkExhausted(t *testing.T, what string, err error) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		t.Fatalf("%s: %v, want ResourceExhausted", what, err)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			if dl := ri.GetRetryDelay().AsDuration(); dl <= 0 || dl > time.Second {
				t.Errorf("%s: retry delay %v, want within (0, 1s]", what, dl)
			}
			return
		}
	}
	t.Errorf("%s: no RetryInfo in %v", what, st.Details())
}

func callUnary(c healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// callStream opens a Watch stream and reads its first message.
func callStream(c healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// TestServerInterceptors: through a real coordinator granting 1/s per
// method, each kind of call gets its one token and the next is refused
// with ResourceExhausted and RetryInfo.
func TestServerInterceptors(t *testing.T) {
	t.Parallel()
	a, clk := stoppedAgent(t, limittest.Template("grpc/*", 1, false))
	l, err := New(a, Options{Key: Method("grpc/"), Resource: []agent.ResourceOption{agent.WithWants(10)}, Logger: limittest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(l.StreamServerInterceptor())})
	for _, tc := range []struct {
		id   string
		call func(healthpb.HealthClient) error
	}{{"grpc/grpc.health.v1.Health/Check", callUnary}, {"grpc/grpc.health.v1.Health/Watch", callStream}} {
		_ = tc.call(c) // creates the resource; refused until its first lease
		lim := granted(t, a, clk, tc.id, 1)
		if err := tc.call(c); err != nil {
			t.Fatalf("%s within the limit: %v", tc.id, err)
		}
		checkExhausted(t, tc.id, tc.call(c))
		if st := lim.Status(); st.Shadow || st.WouldRefuse != 0 {
			t.Errorf("%s: %+v, not in shadow mode", tc.id, st)
		}
	}
}

// TestClientInterceptors: the client refuses calls beyond its share
// before sending them, or with Wait waits for the next token.
func TestClientInterceptors(t *testing.T) {
	t.Parallel()
	a, clk := stoppedAgent(t, limittest.Template("out", 1, false), limittest.Template("out-wait", 1, false))
	fast, err := New(a, Options{Key: Fixed("out"), Resource: []agent.ResourceOption{agent.WithWants(10)}, Logger: limittest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, nil, grpc.WithChainUnaryInterceptor(fast.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(fast.StreamClientInterceptor()))
	_ = callUnary(c)
	granted(t, a, clk, "out", 1)
	if err := callUnary(c); err != nil {
		t.Fatal(err)
	}
	checkExhausted(t, "client unary", callUnary(c))
	checkExhausted(t, "client stream", callStream(c))

	waiting, err := New(a, Options{Key: Fixed("out-wait"), Wait: true, Resource: []agent.ResourceOption{agent.WithWants(10)}, Logger: limittest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	cw := serve(t, nil, grpc.WithChainUnaryInterceptor(waiting.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(waiting.StreamClientInterceptor()))
	if err := driven(clk, func() error { return callUnary(cw) }); err != nil { // waits for the first lease
		t.Fatal(err)
	}
	if err := driven(clk, func() error { return callStream(cw) }); err != nil { // waits up to a second for a token
		t.Fatal(err)
	}
	// A deadline the next token cannot meet fails at once. The limiter
	// measures the real deadline on its clock: that clock first catches
	// up with the real one, and spends the token it earned doing so, if
	// any; standing still again, it has the next token a second away.
	clk.Set(time.Now())
	if lw, err := a.Rate("out-wait"); err != nil {
		t.Fatal(err)
	} else {
		lw.Allow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = cw.Check(ctx, &healthpb.HealthCheckRequest{})
	checkExhausted(t, "client wait beyond the deadline", err)
}

// TestShadow: under a shadow template every call passes, and the agent
// counts those the grant would have refused.
func TestShadow(t *testing.T) {
	t.Parallel()
	a := limittest.Agent(t, limittest.Template("watched", 1, true))
	// The first call must wait for the first lease however slow a loaded
	// machine is (the default wait, 250ms, is not that): one that gives
	// up is admitted before shadow mode is known, and not counted.
	l, err := New(a, Options{Key: Fixed("watched"), Logger: limittest.Quiet, FirstLeaseWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())})
	_ = callUnary(c) // creates the resource, waiting for its first lease
	lim, _ := a.Rate("watched")
	poll.Until(t, 10*time.Second, "no shadow lease", func() bool { return lim.Status().Shadow })
	start := time.Now()
	for i := range 20 {
		if err := callUnary(c); err != nil {
			t.Fatalf("call %d in shadow mode: %v", i, err)
		}
	}
	// At 1/s the grant has a token for a few of the 21 calls, and one
	// more for each second the calls took.
	want := 15 - int(time.Since(start)/time.Second)
	if st := lim.Status(); st.ShadowAdmitted != 21 || int(st.WouldRefuse) < want {
		t.Errorf("ShadowAdmitted %d, WouldRefuse %d; want 21 (the first call waited for the lease) and at least %d at 1/s", st.ShadowAdmitted, st.WouldRefuse, want)
	}
}

func TestBadOptions(t *testing.T) {
	a := limittest.Agent(t)
	for _, o := range []Options{{}, {Key: Fixed("x"), MaxKeys: -1}, {Key: Fixed("x"), Overflow: "bad id"}} {
		if _, err := New(a, o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	if _, err := New(nil, Options{Key: Fixed("x")}); err == nil {
		t.Error("New(nil agent) succeeded")
	}
	// A closed agent makes no limiters: the call fails as the service's
	// fault, not as a limit.
	l, err := New(a, Options{Key: Fixed("x"), Logger: limittest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := l.admit(context.Background(), "/s/m"); status.Code(err) != codes.Internal {
		t.Errorf("closed agent: %v, want Internal", err)
	}
}

// TestClosedLimiter: a key whose limiter the service closed is served by
// a new limiter on its next call, with and without Wait, as Agent.Rate
// makes one once the old is closed; once the agent is closed the call
// fails as the service's fault, not as a limit the caller exceeded.
// Before, the interceptors kept the closed limiter: every call of that
// key failed with ResourceExhausted (Unavailable with Wait), for good.
func TestClosedLimiter(t *testing.T) {
	t.Parallel()
	a := limittest.Agent(t, limittest.Template("closing/*", 100, false))
	for _, wait := range []bool{false, true} {
		id := fmt.Sprintf("closing/wait-%v", wait)
		// A generous wait: a new limiter's first call waits for its first
		// lease however slow a loaded machine is (the default is 250ms).
		l, err := New(a, Options{Key: Fixed(id), Wait: wait, Logger: limittest.Quiet, FirstLeaseWait: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c := serve(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())})
		if err := callUnary(c); err != nil {
			t.Fatalf("wait %v: first call: %v", wait, err)
		}
		lim, err := a.Rate(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := lim.Close(); err != nil {
			t.Fatal(err)
		}
		if err := callUnary(c); err != nil {
			t.Fatalf("wait %v: call after the service closed the key's limiter: %v, want a new limiter's token", wait, err)
		}
		if lim2, _ := a.Rate(id); lim2 == lim || lim2.Status().Source != agent.SourceLease {
			t.Errorf("wait %v: %s is not open again on a lease: %+v", wait, id, lim2.Status())
		}
	}
	l, err := New(a, Options{Key: Fixed("closing/wait-false"), Logger: limittest.Quiet, FirstLeaseWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())})
	if err := callUnary(c); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := callUnary(c); status.Code(err) != codes.Internal {
		t.Errorf("a key served before, after the agent closed: %v, want Internal as for a new key", err)
	}
}

// TestContextEndsWhileWaiting: a call without Wait that waits for its
// key's first capacity and whose context ends meanwhile fails with the
// context's code, as Options says of a call whose context ends while it
// waits, not with ResourceExhausted, which invites a retry after the
// RetryInfo delay of a call its caller has given up.
func TestContextEndsWhileWaiting(t *testing.T) {
	t.Parallel()
	a := limittest.Unserved(t) // no lease ever arrives
	l, err := New(a, Options{Key: Fixed("first"), Logger: limittest.Quiet, FirstLeaseWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.admit(ctx, "/s/m"); status.Code(err) != codes.Canceled {
		t.Errorf("cancelled call: %v, want Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.admit(ctx, "/s/m"); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call whose deadline passed while it waited for the first lease: %v, want DeadlineExceeded", err)
	}
}
