package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/proto/allotpb"
)

// TestBadPutThenRestart stores a valid template, then an invalid revision
// of it as `nats kv put` would, then restarts the coordinator. The fresh replica must serve the last valid revision (or
// refuse the resource with a clear error), never the built-in default.
// The fresh replica is a library replica in this process and, in a second
// run, the `allot coordinator` binary, so that the fix is proved wherever
// it lands.
func TestBadPutThenRestart(t *testing.T) {
	t.Parallel()
	t.Run("replica", func(t *testing.T) {
		runBadPut(t, "bad-put-restart", func(t *testing.T, url string) { StartReplica(t, url, "fresh") })
	})
	t.Run("allot-coordinator", func(t *testing.T) {
		bin := BuildAllot(t)
		runBadPut(t, "bad-put-restart-binary", func(t *testing.T, url string) {
			StartProcess(t, "fresh", bin, "coordinator", "--nats", url, "--server-id", "fresh", "--election-ttl", ElectionTTL.String())
		})
	})
}

// runBadPut runs the scenario; startFresh starts the replica that comes up
// after the bad put.
func runBadPut(t *testing.T, scenario string, startFresh func(t *testing.T, url string)) {
	const (
		resource = "lim"
		capacity = 500
		// safe is the valid revision's safe capacity: a reply carrying it
		// was computed from that revision, not from the default.
		safe = 7
	)
	srv := natstest.Server(t)
	nc := natstest.Conn(t, srv)
	PutTemplate(t, nc, resource, Template(resource, capacity, 20*time.Second, 2*time.Second, fmt.Sprintf(`,"safe_capacity":%d`, safe)))

	first := StartReplica(t, srv.ClientURL(), "first")
	WaitServing(t, 15*time.Second, first)
	ask := func(client string) (*allotpb.GetCapacityResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return Get(ctx, nc, client, resource, 1000)
	}
	resp, err := ask("before")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Granted(resp); err != nil || got != capacity || resp.GetResponse()[0].GetSafeCapacity() != safe {
		t.Fatalf("valid template: got %v (%v), safe %v; want %v, safe %v", got, err, resp.GetResponse()[0].GetSafeCapacity(), capacity, safe)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := Release(ctx, nc, "before", resource); err != nil {
		t.Fatal(err)
	}
	s := StartLoad(t, natstest.Conn(t, srv), "agent", 2, resource, capacity, 300).Sampler

	PutTemplate(t, nc, resource, Template(resource, -1, 20*time.Second, 2*time.Second, ""))
	first.Stop()
	startFresh(t, srv.ClientURL())
	WaitAnswered(t, nc, 30*time.Second)

	resp, err = ask("after")
	var got float64
	if err == nil {
		got, err = Granted(resp)
	}
	// Let the agents refresh with the fresh replica before the result.
	time.Sleep(2 * time.Second)
	var se *ServiceError
	if errors.As(err, &se) {
		Report(t, scenario, s.Stop(), fmt.Sprintf("refused=%q", se.Description))
		if se.Description == "" {
			t.Errorf("%s: refused with code %d and no explanation", scenario, se.Code)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	rr := resp.GetResponse()[0]
	Report(t, scenario, s.Stop(), fmt.Sprintf("granted=%g safe_capacity=%g refresh_interval=%s", got, rr.GetSafeCapacity(), rr.GetGets().GetRefreshInterval().AsDuration()))
	// The refresh interval tells the revision (the default template's is
	// 5s); the safe capacity, never above the lease, may be 0 while the
	// successor learns.
	if rr.GetSafeCapacity() > safe || rr.GetGets().GetRefreshInterval().AsDuration() != 2*time.Second {
		t.Errorf("%s: after the restart %q is served with capacity %g, safe capacity %g, refresh %s: not the last valid revision (capacity %d, safe %d, refresh 2s)",
			scenario, resource, got, rr.GetSafeCapacity(), rr.GetGets().GetRefreshInterval().AsDuration(), capacity, safe)
	}
}
