package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// TestSnapshot: a snapshot taken on the round loop shows the grants the
// clients were answered with, lists claimants largest first and filtered,
// refuses bad limits, and is refused once the coordinator stopped.
func TestSnapshot(t *testing.T) {
	e := start(t, coordinator.Options{Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil))})
	e.get("alpha", map[string]float64{"db": 10})
	e.get("beta", map[string]float64{"db": 95})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.c.Snapshot(ctx, "db", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	r := s.Resource
	if r == nil || !s.Serving || s.Node != "root" || s.Term != 1 || s.ResourceCount != 1 || len(s.Resources) != 1 || s.Clients != 2 {
		t.Fatalf("snapshot %+v", s)
	}
	if r.Capacity != 100 || r.Granted != 100 || r.Wants != 105 || r.Claimants != 2 || len(r.Top) != 2 {
		t.Fatalf("resource %+v", r)
	}
	if r.Top[0].ID != "beta" || r.Top[0].Has != 90 || r.Top[1].ID != "alpha" || r.Top[1].Has != 10 || r.Top[1].Wants != 10 {
		t.Fatalf("claimants %+v", r.Top)
	}
	if s, err = e.c.Snapshot(ctx, "db", 10, "ALP"); err != nil || s.Resource.Matching != 1 || s.Resource.Top[0].ID != "alpha" {
		t.Fatalf("search: %v %+v", err, s)
	}
	if s, err = e.c.Snapshot(ctx, "nothing", 10, ""); err != nil || s.Resource != nil {
		t.Fatalf("unknown resource: %v %+v", err, s)
	}
	for _, top := range []int{-1, coordinator.MaxSnapshotClaimants + 1} {
		if _, err := e.c.Snapshot(ctx, "db", top, ""); err == nil {
			t.Fatalf("top %d accepted", top)
		}
	}
	e.c.Stop()
	if _, err := e.c.Snapshot(ctx, "db", 10, ""); !errors.Is(err, coordinator.ErrNotServing) {
		t.Fatalf("after Stop: %v", err)
	}
}

// TestSnapshotTree: a child node's snapshot shows its parent link and its
// lease from the parent; the parent's lists the child's band as a claimant
// named by the child.
func TestSnapshotTree(t *testing.T) {
	root := natstest.Root(t, "root")
	child := natstest.Child(t, "child", root)
	rnc, cnc := natstest.Conn(t, root.Server), natstest.Conn(t, child.Server)
	rc := coordtest.Start(t, rnc, coordinator.Options{Node: "root", Templates: treeTemplates(100), RoundInterval: 5 * time.Millisecond})
	cc := coordtest.Start(t, cnc, coordinator.Options{Node: "child", Parent: "root", Templates: treeTemplates(100), RoundInterval: 5 * time.Millisecond})
	c := &treeClient{nc: cnc, node: "child", id: "c0"}
	ctx := context.Background()
	var cs, rs *coordinator.Snapshot
	poll.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		c.ask(t, 50)
		var err error
		if cs, err = cc.Snapshot(ctx, "r", 10, ""); err != nil {
			t.Fatal(err)
		}
		if rs, err = rc.Snapshot(ctx, "r", 10, ""); err != nil {
			t.Fatal(err)
		}
		if r := cs.Resource; r == nil || !r.LeaseKnown || r.Lease != 50 || r.Granted != 50 || rs.Resource == nil || len(rs.Resource.Top) != 1 {
			return fmt.Errorf("child %+v, root %+v", cs.Resource, rs.Resource)
		}
		return nil
	})
	r := cs.Resource
	if cs.Parent != "root" || cs.ParentLastOK.IsZero() || cs.ParentError != "" || r.LeaseExpiry.Before(cs.Time) {
		t.Fatalf("child's parent link: %+v", cs)
	}
	if b := rs.Resource.Top[0]; b.ID != "child" || !b.Node || b.Wants != 50 || b.Has != 50 {
		t.Fatalf("parent's claimant %+v", b)
	}
	if ch := rs.Resource.Children; len(ch) != 1 || ch[0] != (coordinator.ChildView{Node: "child", Has: 50, Wants: 50, Clients: 1, Bands: 1}) {
		t.Fatalf("parent's children %+v", ch)
	}
	if len(r.Children) != 0 {
		t.Fatalf("the child has children: %+v", r.Children)
	}
}

// TestSnapshotSharesTheList: snapshots within half a second share one
// resource list (it costs a pass over every client record); a later one
// lists anew. The resource asked for is always read anew.
func TestSnapshotSharesTheList(t *testing.T) {
	var offset atomic.Int64
	base := time.Now()
	now := func() time.Time { return base.Add(time.Duration(offset.Load())) } // frozen but for offset
	e := start(t, coordinator.Options{Now: now, Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl("*", 100, allotpb.Algorithm_FAIR_SHARE)}, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.get("a", map[string]float64{"one": 10})
	if s, err := e.c.Snapshot(ctx, "", 0, ""); err != nil || s.ResourceCount != 1 {
		t.Fatalf("%v %+v", err, s)
	}
	e.get("a", map[string]float64{"two": 10})
	s, err := e.c.Snapshot(ctx, "two", 5, "")
	if err != nil || s.ResourceCount != 1 || len(s.Resources) != 1 || s.Resource == nil || s.Resource.Granted != 10 {
		t.Fatalf("within half a second: %v %+v", err, s)
	}
	offset.Add(int64(600 * time.Millisecond))
	if s, err = e.c.Snapshot(ctx, "", 0, ""); err != nil || s.ResourceCount != 2 || len(s.Resources) != 2 {
		t.Fatalf("after half a second: %v %+v", err, s)
	}
}

// A follower's snapshot is stamped by the replica's clock, like a
// leader's.
func TestFollowerSnapshotOnTheReplicaClock(t *testing.T) {
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	rep, err := coordinator.NewReplica(natstest.Conn(t, natstest.Server(t)), coordinator.ReplicaOptions{
		Options: coordinator.Options{Now: func() time.Time { return at }}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := rep.Snapshot(t.Context(), "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Time.Equal(at) || s.Role != "follower" {
		t.Fatalf("snapshot at %v (role %s), want %v", s.Time, s.Role, at)
	}
}
