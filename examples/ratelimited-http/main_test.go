package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/dashboard"
)

// TestDemoDashboard: the demo serves its coordinator's dashboard, which
// shows an agent's lease on the demo resource.
func TestDemoDashboard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := startDemo(ctx, "api/search", "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	nc, err := nats.Connect(d.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a, err := agent.New(nc, agent.WithClientID("svc-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Rate("api/search", agent.WithWants(3)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(d.dashURL + "snapshot?resource=api/search")
		if err != nil {
			t.Fatal(err)
		}
		var ev dashboard.Event
		err = json.NewDecoder(resp.Body).Decode(&ev)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if r := ev.Snapshot.Resource; r != nil && r.Capacity == 5 && r.Granted == 3 && len(r.Top) == 1 && r.Top[0].ID == "svc-1" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo's dashboard never showed svc-1's lease: %+v", ev.Snapshot)
		}
	}
}
