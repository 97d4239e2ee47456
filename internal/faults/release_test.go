package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/proto/allotpb"
)

// Release race setup (a get and a release back to back): capacity 100 with 30s leases, so
// a phantom lease would starve a newcomer for far longer than the test.
const (
	raceCapacity = 100
	raceTrials   = 40
)

// raceSetup starts a server, the race template and a serving replica.
func raceSetup(t *testing.T) (*server.Server, *nats.Conn) {
	t.Helper()
	srv := natstest.Server(t)
	nc := natstest.Conn(t, srv)
	PutTemplate(t, nc, "race", Template("race-*", raceCapacity, 30*time.Second, 5*time.Second, ""))
	WaitServing(t, 15*time.Second, StartReplica(t, srv.ClientURL(), "r1"))
	return srv, nc
}

// newcomerGets asks for the whole capacity of resource as a new client
// and returns what it got.
func newcomerGets(t *testing.T, nc *nats.Conn, client, resource string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := Get(ctx, nc, client, resource, raceCapacity)
	if err != nil {
		t.Fatalf("newcomer: %v", err)
	}
	got, err := Granted(resp)
	if err != nil {
		t.Fatalf("newcomer: %v", err)
	}
	return got
}

// TestReleaseRacingGet publishes a get and a release of one client back to
// back on one connection, 40 times: the client released last, so it must
// hold nothing, and a newcomer must then get the whole capacity.
func TestReleaseRacingGet(t *testing.T) {
	_, nc := raceSetup(t)
	starved, worst := 0, 0.0
	for i := range raceTrials {
		resource, client := fmt.Sprintf("race-get-%d", i), fmt.Sprintf("racer-%d", i)
		inbox := nc.NewRespInbox()
		sub, err := nc.SubscribeSync(inbox + ".*")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest(subjects.Coordinator("root", subjects.CapacityGet), inbox+".get", GetRequest(client, resource, raceCapacity)); err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest(subjects.Coordinator("root", subjects.CapacityRelease), inbox+".release", ReleaseRequest(client, resource)); err != nil {
			t.Fatal(err)
		}
		var held float64
		for range 2 {
			m, err := sub.NextMsg(3 * time.Second)
			if err != nil {
				t.Fatalf("trial %d: reply: %v", i, err)
			}
			if m.Subject == inbox+".get" {
				resp := &allotpb.GetCapacityResponse{}
				if err := DecodeReply(m, resp); err != nil {
					t.Fatalf("trial %d: get: %v", i, err)
				}
				held, _ = Granted(resp)
			} else if err := DecodeReply(m, &allotpb.ReleaseCapacityResponse{}); err != nil {
				t.Fatalf("trial %d: release: %v", i, err)
			}
		}
		_ = sub.Unsubscribe()
		got := newcomerGets(t, nc, "newcomer-"+client, resource)
		// The racer released after its get: it uses nothing, whatever the
		// coordinator's books say.
		worst = max(worst, got/raceCapacity)
		if got < raceCapacity-Tolerance {
			starved++
			t.Logf("trial %d: the racer was granted %g and released; a newcomer then got %g of %d", i, held, got, raceCapacity)
		}
	}
	Report(t, "release-racing-get", Result{Max: worst, Samples: raceTrials, Worst: "newcomer"}, fmt.Sprintf("newcomer_starved=%d/%d", starved, raceTrials))
	if starved > 0 {
		t.Errorf("release-racing-get: in %d of %d trials a released client kept its lease (phantom) and starved a newcomer", starved, raceTrials)
	}
}

// TestCloseDuringRefresh closes an agent while its first refresh, which
// leaves as soon as the resource is created, is being sent or answered,
// 40 times at staggered moments: the lease that refresh brings must not
// outlive the Close, and a newcomer must then get the whole capacity. A
// copy of each request seen on the wire counts the refreshes that left.
func TestCloseDuringRefresh(t *testing.T) {
	srv, nc := raceSetup(t)
	agentsNC := natstest.Conn(t, srv)
	spy, err := agentsNC.SubscribeSync(subjects.Coordinator("root", subjects.CapacityGet)) // a copy of every request; it never answers
	if err != nil {
		t.Fatal(err)
	}
	if err := agentsNC.Flush(); err != nil {
		t.Fatal(err)
	}
	starved, inFlight, worst := 0, 0, 0.0
	for i := range raceTrials {
		resource := fmt.Sprintf("race-close-%d", i)
		a, err := agent.New(agentsNC, agent.WithClientID(fmt.Sprintf("closer-%d", i)), agent.WithLogger(TestLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Rate(resource, agent.WithWants(raceCapacity)); err != nil {
			t.Fatal(err)
		}
		// Within 150µs of the refresh leaving: later, the release arrives
		// long after the get and the race is rarely lost.
		time.Sleep(time.Duration(i%4) * 50 * time.Microsecond)
		_ = a.Close()
		if _, err := spy.NextMsg(100 * time.Millisecond); err == nil {
			inFlight++
		}
		got := newcomerGets(t, nc, fmt.Sprintf("newcomer-%d", i), resource)
		for { // drop the copies of the newcomer's request and of any retry
			if _, err := spy.NextMsg(20 * time.Millisecond); err != nil {
				break
			}
		}
		// A closed agent's limiters are closed: it uses nothing.
		worst = max(worst, got/raceCapacity)
		if got < raceCapacity-Tolerance {
			starved++
			t.Logf("trial %d: after Close during a refresh a newcomer got %g of %d", i, got, raceCapacity)
		}
	}
	Report(t, "close-during-refresh", Result{Max: worst, Samples: raceTrials, Worst: "newcomer"}, fmt.Sprintf("newcomer_starved=%d/%d refresh_sent=%d/%d", starved, raceTrials, inFlight, raceTrials))
	if starved > 0 {
		t.Errorf("close-during-refresh: in %d of %d trials the closed agent kept a lease (phantom) and starved a newcomer", starved, raceTrials)
	}
}
