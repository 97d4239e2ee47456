package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// TestSnapshot: a snapshot taken on the round loop shows the grants the
// clients were answered with, lists claimants largest first and filtered,
// refuses bad limits, and is refused once the coordinator stopped.
func TestSnapshot(t *testing.T) {
	e := start(t, coordinator.Options{Templates: coordinator.StaticTemplates(config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil))})
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
