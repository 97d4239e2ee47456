package coordinator_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/proto/allotpb"
)

// Every request delivered before Stop is answered: Stop keeps running
// rounds until micro has handed over what its connection had received.
func TestStopAnswersDeliveredRequests(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	c, err := coordinator.New(nc, coordinator.Options{RoundInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	cl := natstest.Conn(t, s)
	inbox := nats.NewInbox()
	var got atomic.Int64
	if _, err := cl.Subscribe(inbox, func(*nats.Msg) { got.Add(1) }); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := range n {
		body := fmt.Sprintf(`{"client_id":"c%d","resource":[{"resource_id":"db","wants":1}]}`, i)
		if err := cl.PublishRequest(coordinator.Subject("root", "capacity.get"), inbox, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Flush(); err != nil {
		t.Fatal(err)
	}
	// The server hands the requests to the coordinator's connection
	// asynchronously; on a busy machine some may still be on their way
	// after Flush. Stop once all have reached it (nothing else is sent
	// to that connection).
	poll.For(t, 10*time.Second, time.Millisecond, func() error {
		if in := nc.Stats().InMsgs; in < n {
			return fmt.Errorf("only %d of %d requests reached the coordinator's connection", in, n)
		}
		return nil
	})
	c.Stop()
	// Stop has returned: every answer is on its way.
	poll.For(t, 10*time.Second, poll.Interval, func() error {
		if g := got.Load(); g != n {
			return fmt.Errorf("%d of %d requests delivered before Stop were never answered", n-g, n)
		}
		return nil
	})
}

// A client naming thousands of resources it does not want cannot stop the
// node from granting to others (the lease record stays within bounds).
func TestManyResourcesDoNotBlockGrants(t *testing.T) {
	e := start(t, coordinator.Options{})
	pad := strings.Repeat("x", 240)
	for k := range 5 {
		req := &allotpb.GetCapacityRequest{ClientId: fmt.Sprint("spam", k)}
		for j := range 1000 {
			req.Resource = append(req.Resource, &allotpb.ResourceRequest{ResourceId: fmt.Sprintf("%s-%d-%d", pad, k, j), Wants: float64(j % 2)})
		}
		e.getReq(req)
	}
	if got := e.get("victim", map[string]float64{"db": 10}).GetResponse()[0].GetGets().GetCapacity(); got != 10 {
		t.Fatalf("a legitimate client got %v of the 10 it wants", got)
	}
}

func TestMaxResources(t *testing.T) {
	e := start(t, coordinator.Options{MaxResources: 3})
	e.get("a", map[string]float64{"r1": 1, "r2": 1})
	// One new resource fits, the next one gets its own 429; the rest of
	// the request is served.
	req := &allotpb.GetCapacityRequest{ClientId: "b", Resource: []*allotpb.ResourceRequest{
		{ResourceId: "r1", Wants: 1}, {ResourceId: "r3", Wants: 1}, {ResourceId: "r4", Wants: 1}}}
	resp := e.getReq(req).GetResponse()
	if resp[0].GetGets().GetCapacity() != 1 || resp[1].GetGets().GetCapacity() != 1 {
		t.Fatalf("known and fitting resources not served: %v", resp)
	}
	if resp[2].GetErrorCode() != 429 || !strings.Contains(resp[2].GetError(), "limit is 3") || resp[2].GetGets() != nil {
		t.Fatalf("r4: %v", resp[2])
	}
	// A request of new resources only gets a whole-request 429.
	m := e.reqJSON("allot.root.capacity.get", `{"client_id":"c","resource":[{"resource_id":"r5","wants":1}]}`)
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "429" {
		t.Fatalf("code %q: %s", code, m.Header.Get("Nats-Service-Error"))
	}
}
