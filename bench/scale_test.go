package bench

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// TestFillLeasesAsksAgainAfter503: the scale benchmark's filler keeps
// more newcomers' requests in flight than the coordinator's intake takes
// (here 8, 2 of them kept for holders): the refused ones are asked again,
// as agents do, and every client gets its lease. It once counted each 503
// as a failure, so allot bench scale stopped at its first size.
func TestFillLeasesAsksAgainAfter503(t *testing.T) {
	s := natstest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := startCoordinator(ctx, natstest.Conn(t, s), coordOptions{node: "fill", tmpl: benchTemplate(1000, 10*time.Second, time.Second),
		intake: intake.Limits{MaxInFlight: 8}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := fillLeases(ctx, &Env{Short: true}, s.ClientURL(), coordinator.Subject("fill", "capacity.get"), 300, 64, wire.Protobuf, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st := coordtest.Stats(t, natstest.Conn(t, s)); st.Intake.Refused == 0 {
		t.Fatalf("the intake refused nothing (%+v): the test did not exercise a 503", st.Intake)
	}
}

// TestFillLeasesAsksAgainAfterALostRequest: a request the coordinator
// never answers (here every tenth client's first, answered only long
// after) is asked again once unanswered for the filler's time-out, and
// the late reply to the first attempt is ignored: every client is asked
// and the fill ends. Lost requests once held their slots for good, so
// allot bench scale timed out at a million on a busy machine.
func TestFillLeasesAsksAgainAfterALostRequest(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	var mu sync.Mutex
	asked := map[string]int{}
	sub, err := nc.Subscribe("fill.get", func(m *nats.Msg) {
		var req allotpb.GetCapacityRequest
		if err := wire.Unmarshal(wire.Protobuf, m.Data, &req); err != nil {
			t.Error(err)
			return
		}
		id := req.GetClientId()
		mu.Lock()
		asked[id]++
		first := asked[id] == 1
		mu.Unlock()
		if first && id[len(id)-1] == '0' {
			time.AfterFunc(time.Second, func() { _ = m.Respond(nil) })
			return
		}
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	if err := fillLeases(ctx, &Env{Short: true}, s.ClientURL(), "fill.get", n, 16, wire.Protobuf, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != n {
		t.Errorf("%d clients asked, want %d", len(asked), n)
	}
	for id, k := range asked {
		if id[len(id)-1] == '0' && k < 2 {
			t.Errorf("%s asked %d times: its lost request was not asked again", id, k)
		}
	}
}

// TestFillLeasesAsksAgainWithoutResponders: NATS answers a request nobody
// subscribes to yet with a "no responders" status message; the filler
// asks again instead of counting it as a lease, so every client is asked
// once the responder is there. It once counted them as answers (and in
// the test above, whose responder raced the filler, fewer clients were
// asked than the fill reported).
func TestFillLeasesAsksAgainWithoutResponders(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 50
	done := make(chan error, 1)
	go func() {
		done <- fillLeases(ctx, &Env{Short: true}, s.ClientURL(), "late.get", n, 8, wire.Protobuf, time.Minute)
	}()
	// The filler's first requests reach the server with nobody to serve them.
	poll.Until(t, 20*time.Second, "requests without responders", func() bool {
		v, err := s.Varz(nil)
		return err == nil && v.InMsgs >= 8
	})
	var mu sync.Mutex
	asked := map[string]bool{}
	sub, err := nc.Subscribe("late.get", func(m *nats.Msg) {
		var req allotpb.GetCapacityRequest
		if err := wire.Unmarshal(wire.Protobuf, m.Data, &req); err == nil {
			mu.Lock()
			asked[req.GetClientId()] = true
			mu.Unlock()
		}
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != n {
		t.Fatalf("%d clients asked, want %d", len(asked), n)
	}
}
