package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// TestShadowReplies: a template with Shadow, or a coordinator with
// Options.Shadow, marks its leases shadow in binary and JSON replies,
// while the allocation itself is unchanged, and micro STATS say which
// resources are shadow and whether the whole coordinator is, as does the
// dashboard's snapshot.
func TestShadowReplies(t *testing.T) {
	t.Parallel()
	shadowed := tmpl("watched", 10, allotpb.Algorithm_FAIR_SHARE)
	shadowed.Shadow = true
	for _, global := range []bool{false, true} {
		e := start(t, coordinator.Options{
			Shadow:    global,
			Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{shadowed, tmpl("strict", 10, allotpb.Algorithm_FAIR_SHARE)}, nil)),
		})
		resp := e.get("c1", map[string]float64{"watched": 50, "strict": 50})
		for _, rr := range resp.GetResponse() {
			want := global || rr.GetResourceId() == "watched"
			if rr.GetShadow() != want {
				t.Errorf("global %v: %s: shadow = %v, want %v", global, rr.GetResourceId(), rr.GetShadow(), want)
			}
			if got := rr.GetGets().GetCapacity(); got != 10 {
				t.Errorf("global %v: %s: granted %g, want 10 (shadow does not change the allocation)", global, rr.GetResourceId(), got)
			}
		}
		m := e.reqJSON(coordinator.Subject("root", "capacity.get"), `{"client_id":"c2","resource":[{"resource_id":"watched","wants":5},{"resource_id":"strict","wants":5}]}`)
		var reply struct {
			Response []struct {
				ResourceID string `json:"resource_id"`
				Shadow     *bool  `json:"shadow"`
			} `json:"response"`
		}
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			t.Fatalf("%s: %v", m.Data, err)
		}
		for _, rr := range reply.Response {
			want := global || rr.ResourceID == "watched"
			if rr.Shadow == nil || *rr.Shadow != want {
				t.Errorf("global %v: JSON %s: shadow %v, want %v present: %s", global, rr.ResourceID, rr.Shadow, want, m.Data)
			}
		}

		var st coordinator.Stats
		poll.For(t, 10*time.Second, 50*time.Millisecond, func() error { // refreshed every second
			if st = e.stats(); len(st.TopResources) < 2 {
				return fmt.Errorf("global %v: top resources %+v", global, st.TopResources)
			}
			return nil
		})
		if st.Shadow != global {
			t.Errorf("Stats.Shadow = %v, want %v", st.Shadow, global)
		}
		for _, r := range st.TopResources {
			if want := global || r.ID == "watched"; r.Shadow != want {
				t.Errorf("global %v: STATS %s: shadow %v, want %v", global, r.ID, r.Shadow, want)
			}
		}
		// The dashboard's snapshot says the same, in the list and in the
		// followed resource's detail.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		snap, err := e.c.Snapshot(ctx, "strict", 10, "")
		cancel()
		if err != nil || snap.Resource == nil || snap.Resource.Shadow != global || len(snap.Resources) != 2 {
			t.Fatalf("global %v: snapshot %+v, %v", global, snap, err)
		}
		for _, r := range snap.Resources {
			if want := global || r.ID == "watched"; r.Shadow != want {
				t.Errorf("global %v: snapshot %s: shadow %v, want %v", global, r.ID, r.Shadow, want)
			}
		}
	}
}

// stats reads the coordinator's micro STATS data (the first endpoint's).
func (e *env) stats() coordinator.Stats {
	e.t.Helper()
	return coordtest.Stats(e.t, e.nc)
}
