package dashboard_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/dashboard"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/replica"
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
		// A seat of 30s: no failover to wait for, and a leader whose
		// renewal came late on a loaded machine (past a 1s TTL less the
		// 0.5s margin) handed the seat to the follower mid-test.
		r, err := coordinator.NewReplica(natstest.Conn(t, s), coordinator.ReplicaOptions{Options: coordinator.Options{ServerID: id}, Election: replica.Election{TTL: 30 * time.Second}})
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

	// The replicas list is refreshed every 2s: wait until it has caught
	// up with the election.
	var ev dashboard.Event
	var leader *coordinator.Snapshot
	follower := ""
	poll.For(t, 30*time.Second, 100*time.Millisecond, func() error {
		ev = getEvent(t, srv.URL+"/snapshot")
		roles := map[string]string{}
		for _, r := range ev.Replicas {
			roles[r.ServerID] = r.Role
		}
		if leader = ev.Snapshot; leader == nil || !leader.Serving || len(roles) != 2 || roles[leader.ServerID] != "leader" {
			return fmt.Errorf("no leader serving and listed as such: %+v", ev)
		}
		follower = map[string]string{"rep-a": "rep-b", "rep-b": "rep-a"}[leader.ServerID]
		if roles[follower] != "follower" {
			t.Fatalf("replicas %+v", ev.Replicas)
		}
		return nil
	})
	if leader.Role != "leader" || leader.Leader != leader.ServerID || leader.Term == 0 {
		t.Fatalf("leader's snapshot %+v", leader)
	}
	for _, r := range reps {
		fs, err := r.Snapshot(ctx, "", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if fs.ServerID != follower {
			continue
		}
		if fs.Serving || fs.Role != "follower" || len(fs.Resources) != 0 {
			t.Fatalf("follower's snapshot %+v", fs)
		}
		// The follower learns who leads from the election's watch, which
		// on a busy machine can trail the leader's own start.
		poll.For(t, 30*time.Second, 100*time.Millisecond, func() error {
			if fs, err = r.Snapshot(ctx, "", 0, ""); err != nil {
				t.Fatal(err)
			}
			if fs.Serving || fs.Role != "follower" || len(fs.Resources) != 0 {
				t.Fatalf("follower's snapshot %+v", fs)
			}
			if fs.Leader != leader.ServerID {
				return fmt.Errorf("follower's snapshot names leader %q, want %q", fs.Leader, leader.ServerID)
			}
			return nil
		})
	}
}
