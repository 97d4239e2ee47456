package faults

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/poll"
)

// restartableServer is an embedded server that can be restarted on the
// same port and store directory.
type restartableServer struct {
	mu   sync.Mutex
	srv  *server.Server
	port int
	dir  string
}

func startRestartable(t *testing.T) *restartableServer {
	t.Helper()
	r := &restartableServer{dir: t.TempDir()}
	srv, err := embed.Start(embed.Options{StoreDir: r.dir})
	if err != nil {
		t.Fatal(err)
	}
	r.srv, r.port = srv, srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.srv.Shutdown()
		r.srv.WaitForShutdown()
	})
	return r
}

func (r *restartableServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", r.port) }

// restart stops the server and starts it again after down.
func (r *restartableServer) restart(t *testing.T, down time.Duration) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
	time.Sleep(down)
	srv, err := embed.Start(embed.Options{Port: r.port, StoreDir: r.dir})
	if err != nil {
		t.Fatalf("restart nats-server on port %d: %v", r.port, err)
	}
	r.srv = srv
}

// restartDown is how long the server is down in a restart: longer than
// the election TTL, as a real restart of a server process may take, so
// that leadership may change while the replicas reconnect.
const restartDown = ElectionTTL + time.Second

// TestNATSRestart restarts the NATS server (same port, same store) under
// three replicas 3.5s after they start. Once requests are
// answered again, 40 more must all be answered: no subscription may be
// left dead on the server.
func TestNATSRestart(t *testing.T) {
	const requests = 40
	rs := startRestartable(t)
	nc, err := Connect(rs.url(), "faults test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	PutTemplate(t, nc, "fault", Template(stdResource, stdCapacity, stdLease, stdRefresh, ""))
	started := time.Now()
	reps := []*Replica{
		StartReplica(t, rs.url(), "r1"),
		StartReplica(t, rs.url(), "r2"),
		StartReplica(t, rs.url(), "r3"),
	}
	WaitServing(t, 15*time.Second, reps...)

	agentsNC, err := Connect(rs.url(), "faults agents")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agentsNC.Close)
	load := StartLoad(t, agentsNC, "agent", stdAgents, stdResource, stdCapacity, stdWants)
	s := load.Sampler

	time.Sleep(time.Until(started.Add(3500 * time.Millisecond))) // the scenario's timing
	rs.restart(t, restartDown)

	// Settled: one request answered after the restart.
	settled := poll.Ok(20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := Get(ctx, nc, "settle", stdResource, 1)
		return err == nil
	})
	if !settled {
		Report(t, "nats-restart", s.Stop())
		t.Fatal("nats-restart: no request answered within 20s of the restart")
	}
	errs := AskConcurrently(nc, "cli", stdResource, requests, 3*time.Second)
	poll.Ok(5*time.Second, load.Leased)
	Report(t, "nats-restart", s.Stop(), fmt.Sprintf("unanswered=%d/%d", len(errs), requests))
	if len(errs) > 0 {
		t.Errorf("nats-restart: %d of %d requests were not answered after the restart settled, e.g. %v", len(errs), requests, errs[0])
	}
	if !load.Leased() {
		t.Errorf("nats-restart: the agents do not all hold leases 5s after the requests")
	}
}
