package coordinator_test

import (
	"testing"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// A template's max_priority bounds the band a client may claim (issue 13:
// a self-assigned priority 1000 took the whole capacity from an honest
// client at priority 0): above it, a request is served at it, so the two
// share the capacity, and STATS count the capped request.
func TestMaxPriorityCapsSelfAssignedPriority(t *testing.T) {
	for _, tc := range []struct {
		name     string
		doc      string
		attacker float64 // what the client asking at priority 1000 gets
	}{
		{"bounded", `{"identifier_glob":"prio","capacity":100,"algorithm":{"kind":"FAIR_SHARE"},"max_priority":0}`, 50},
		{"unbounded", `{"identifier_glob":"prio","capacity":100,"algorithm":{"kind":"FAIR_SHARE"}}`, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm, _, err := config.ParseAndCompile("prio", 1, []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			e := start(t, coordinator.Options{Templates: coordinator.StaticTemplates(config.NewSet(1, []*config.Template{tm}, nil))})
			ask := func(client string, priority int32) float64 {
				resp := e.getReq(&allotpb.GetCapacityRequest{ClientId: client, Resource: []*allotpb.ResourceRequest{{ResourceId: "prio", Wants: 100, Priority: priority}}})
				return resp.GetResponse()[0].GetGets().GetCapacity()
			}
			// A few refreshes each: shrinks are confirmed by the next
			// request, then the freed capacity moves.
			var got float64
			for range 5 {
				ask("honest", 0)
				got = ask("attacker", 1000)
			}
			if got != tc.attacker {
				t.Fatalf("the client claiming priority 1000 got %v, want %v", got, tc.attacker)
			}
			if capped := e.stats().PriorityCapped; (capped > 0) != (tc.attacker == 50) {
				t.Fatalf("priority_capped = %d", capped)
			}
		})
	}
}
