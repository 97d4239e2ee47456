package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/dashboard"
	"github.com/allot/allot/internal/natstest"
)

// TestReplicas: over two replicas of one node, the dashboard shows the
// leader's state; the follower's own snapshot names that leader and
// serves nothing; the replicas list (from micro STATS) has both.
func TestReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	var reps []*coordinator.Replica
	done := make(chan struct{}, 2)
	rctx, stop := context.WithCancel(ctx)
	for _, id := range []string{"rep-a", "rep-b"} {
		r, err := coordinator.NewReplica(natstest.Conn(t, s), coordinator.ReplicaOptions{Options: coordinator.Options{ServerID: id}, ElectionTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
		go func() {
			_ = r.Run(rctx)
			done <- struct{}{}
		}()
	}
	t.Cleanup(func() {
		stop()
		<-done
		<-done
	})
	d, err := dashboard.New(dashboard.Options{Source: dashboard.Replicas(func() []*coordinator.Replica { return reps }), Conn: nc, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.Run(rctx) }()
	srv := httptest.NewServer(d.Handler(""))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})

	var ev dashboard.Event
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(srv.URL + "/snapshot")
		if err != nil {
			t.Fatal(err)
		}
		ev = dashboard.Event{}
		err = json.NewDecoder(resp.Body).Decode(&ev)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Snapshot != nil && ev.Snapshot.Serving && len(ev.Replicas) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader serving with two replicas listed: %+v", ev)
		}
	}
	leader := ev.Snapshot
	if leader.Role != "leader" || leader.Leader != leader.ServerID || leader.Term == 0 {
		t.Fatalf("leader's snapshot %+v", leader)
	}
	roles := map[string]string{}
	for _, r := range ev.Replicas {
		roles[r.ServerID] = r.Role
	}
	follower := "rep-a"
	if leader.ServerID == "rep-a" {
		follower = "rep-b"
	}
	if roles[leader.ServerID] != "leader" || roles[follower] != "follower" {
		t.Fatalf("replicas %+v", ev.Replicas)
	}
	for _, r := range reps {
		fs, err := r.Snapshot(ctx, "", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if fs.ServerID == follower && (fs.Serving || fs.Role != "follower" || fs.Leader != leader.ServerID || len(fs.Resources) != 0) {
			t.Fatalf("follower's snapshot %+v", fs)
		}
	}
}
