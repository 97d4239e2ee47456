package leader_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/election/electiontest"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// seated is one replica on a Seat whose terms serve test.echo, the
// election on a manual clock.
type seated struct {
	seat    leader.Seat[*leader.Term]
	clock   *electiontest.ManualClock
	cfg     election.Config
	entered chan struct{} // a request reached the handler
	proceed chan struct{} // let it decide
	serving atomic.Int64  // OnServing calls with true
}

func runSeat(t *testing.T, nc *nats.Conn, cfg leader.SeatConfig) *seated {
	t.Helper()
	r := &seated{clock: electiontest.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
		entered: make(chan struct{}, 1), proceed: make(chan struct{})}
	r.cfg = election.Config{Key: "n1.test.0", ID: "s1", TTL: 30 * time.Second, Clock: r.clock}
	cfg.Election, cfg.What = r.cfg, "test partition"
	cfg.OnServing = func(_ uint64, serving bool) {
		if serving {
			r.serving.Add(1)
		}
	}
	start := func(ctx context.Context, el *election.Elector, term uint64) (*leader.Term, error) {
		g := leader.NewGate(func() bool { return el.Valid(term) }, nil, "test partition")
		sp := spec(g, leader.Endpoint{Name: "echo", Subject: "test.echo", Handle: func(m micro.Request) {
			if string(m.Data()) == "wait" {
				r.entered <- struct{}{}
				<-r.proceed
			}
			echo(g)(m)
		}})
		sp.Term = term
		return leader.Start(ctx, nc, sp)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.seat.Run(ctx, nc, cfg, start) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return r
}

// A seat wins, starts a term that serves, and reports its status on the
// status service; when its validity lapses the term withholds its reply,
// stops and the replica reports it no longer serves.
func TestSeatServesUntilValidityLapses(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	r := runSeat(t, nc, leader.SeatConfig{Status: &leader.StatusService{
		Name: "leader-test-replica", Version: "0.0.1", Description: "replicas", Metadata: map[string]string{"node": "n1"},
		Subject: "test.replica.status", EndpointMetadata: map[string]string{"node": "n1"},
		Data: func(st leader.Status) any { return st },
	}})
	poll.Until(t, wait, "the seat to serve", func() bool { return r.seat.Status().Serving })
	st := r.seat.Status()
	if st.Role != election.RoleLeader || st.Term == 0 || st.Leader != "s1" || st.Failure != "" || r.serving.Load() != 1 {
		t.Fatalf("status %+v, OnServing %d", st, r.serving.Load())
	}
	term, n := r.seat.Current()
	if term == nil || n != st.Term {
		t.Fatalf("current %v %d", term, n)
	}
	cl := natstest.Conn(t, s)
	var got leader.Status
	request(t, cl, "test.replica.status", &got)
	if got != st {
		t.Fatalf("status endpoint %+v, want %+v", got, st)
	}
	if m, err := cl.Request("test.echo", []byte("hi"), wait); err != nil || string(m.Data) != "hi" {
		t.Fatalf("echo: %v %v", m, err)
	}

	// A request is taken up; the validity lapses before it is answered.
	inbox := nats.NewInbox()
	var replies atomic.Int64
	if _, err := cl.Subscribe(inbox, func(*nats.Msg) { replies.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := cl.PublishRequest("test.echo", inbox, []byte("wait")); err != nil {
		t.Fatal(err)
	}
	<-r.entered
	r.clock.Advance(r.cfg.TTL)
	if r.seat.Status().Serving {
		t.Fatal("serving past the deadline")
	}
	close(r.proceed)
	poll.Until(t, wait, "the term to stop", func() bool { term, _ := r.seat.Current(); return term == nil })
	// A lapsed term stops without waiting for the request it holds (its
	// successor answers the retry); the handler finishes a moment later.
	poll.Until(t, wait, "the held request to be handled", func() bool { _, h := term.Counts(); return h == 2 })
	if n := term.Gate().Silenced.Load(); n != 1 {
		t.Fatalf("%d replies withheld, want 1", n)
	}
	if !errors.Is(term.Err(), leader.ErrLapsed) {
		t.Fatalf("term error %v", term.Err())
	}
	if d, h := term.Counts(); d != 2 || h != 2 {
		t.Fatalf("delivered %d, handled %d", d, h)
	}
	if st := r.seat.Status(); st.Serving {
		t.Fatalf("status after the lapse %+v", st)
	}
	// The election resigns once the term has stopped, a moment later.
	poll.Until(t, wait, "the replica to follow", func() bool {
		st := r.seat.Status()
		return st.Role == election.RoleFollower && !st.Serving
	})
	if err := cl.Flush(); err != nil {
		t.Fatal(err)
	}
	if replies.Load() != 0 {
		t.Fatal("a lapsed leader replied")
	}
}

// With ElectionConn the election runs on a connection of its own: the
// service's connection carries none of its traffic.
func TestSeatElectsOnItsOwnConnection(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s, nats.Name("service"))
	r := runSeat(t, nc, leader.SeatConfig{ElectionConn: leader.DialBeside})
	poll.Until(t, wait, "the seat to serve", func() bool { return r.seat.Status().Serving })
	if out := nc.Stats().OutMsgs; out != 0 {
		t.Fatalf("the service connection sent %d messages for the election", out)
	}
}

// DialBeside connects with the options of the service's connection but
// none of its callbacks.
func TestDialBeside(t *testing.T) {
	s := natstest.Server(t)
	var closed atomic.Int64
	nc := natstest.Conn(t, s, nats.Name("svc"), nats.ClosedHandler(func(*nats.Conn) { closed.Add(1) }))
	c, err := leader.DialBeside(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c == nc || !c.IsConnected() || c.Opts.Name != "svc (election)" || c.Opts.ClosedCB != nil || c.Opts.MaxReconnect != nc.Opts.MaxReconnect {
		t.Fatalf("dialed %+v", c.Opts)
	}
	var echoed atomic.Bool
	if _, err := nc.Subscribe("beside", func(m *nats.Msg) { echoed.Store(true); _ = m.Respond(nil) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Request("beside", nil, wait); err != nil || !echoed.Load() {
		t.Fatalf("the second connection does not reach the first one's server: %v", err)
	}
}

// The election on a connection of its own still speaks for the service:
// once the service's connection closes, the seat stops serving and Run
// ends, as it did with the election on that connection.
func TestSeatEndsWithTheServiceConnection(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s, nats.Name("service"))
	var seat leader.Seat[*leader.Term]
	cfg := leader.SeatConfig{Election: election.Config{Key: "n1.test.0", ID: "s1"}, What: "test", ElectionConn: leader.DialBeside}
	done := make(chan error, 1)
	go func() {
		done <- seat.Run(context.Background(), nc, cfg, func(ctx context.Context, _ *election.Elector, term uint64) (*leader.Term, error) {
			sp := spec(nil)
			sp.Term = term
			return leader.Start(ctx, nc, sp)
		})
	}()
	poll.Until(t, wait, "the seat to serve", func() bool { return seat.Status().Serving })
	nc.Close()
	select {
	case err := <-done:
		t.Logf("Run returned %v", err)
	case <-time.After(wait):
		t.Fatal("Run still campaigns after the service's connection closed")
	}
	if _, term := seat.Current(); term != 0 {
		t.Fatalf("still serving term %d", term)
	}
}
