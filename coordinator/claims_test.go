package coordinator_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// A template's max_priority bounds the band a client may claim (without it
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
			e := start(t, coordinator.Options{Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{tm}, nil))})
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

// A client that lies in learning mode (say it reports a lease of 1e9
// until 2200 after a takeover) is not trusted beyond what the lease record
// allows: the record lists who held leases, the liar is not among them, so
// its claim is refused (counted in STATS as over_claims, and logged) and it
// is served like any newcomer, from capacity the record does not cover.
func TestLyingClientInLearning(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	set := config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil)
	set.Templates()[0].LearningModeDuration = 10 * time.Second
	e := &env{t: t, nc: nc}
	first := coordtest.Start(t, nc, coordinator.Options{Templates: sources.StaticTemplates(set), RoundInterval: coordinator.NoRoundInterval})
	a := e.get("a", map[string]float64{"db": 70}).GetResponse()[0].GetGets()
	if a.GetCapacity() != 70 {
		t.Fatalf("a got %v, want 70", a.GetCapacity())
	}
	first.Stop()
	coordtest.Start(t, nc, coordinator.Options{Templates: sources.StaticTemplates(set), RoundInterval: coordinator.NoRoundInterval})
	lie := &allotpb.Lease{Capacity: 1e9, ExpiryTime: timestamppb.New(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))}
	liar := e.getReq(&allotpb.GetCapacityRequest{ClientId: "liar", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 100, Has: lie}}}).GetResponse()[0].GetGets()
	if liar.GetCapacity() > 100-70 {
		t.Fatalf("the liar got %v while a may still hold 70 of 100", liar.GetCapacity())
	}
	ra := e.getReq(&allotpb.GetCapacityRequest{ClientId: "a", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 70, Has: a}}}).GetResponse()[0].GetGets()
	if ra.GetCapacity() != 70 {
		t.Fatalf("a's lease was not honoured after the liar: %v", ra.GetCapacity())
	}
	if got := e.stats().OverClaims; got != 1 {
		t.Fatalf("over_claims = %d, want 1", got)
	}
}
