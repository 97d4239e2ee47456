package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// A leader keys its holder digests with a secret it draws, stored in its
// lease record; a successor that reads the record hears the promised
// holder back under that key and ends learning at once. The
// same takeover from the record stripped of its key (as an older version
// wrote it) keeps learning: the newcomer gets only what the ceiling
// leaves.
func TestHolderDigestKeyThroughTakeover(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keep    bool
		newcome float64
	}{
		{"keyed record", true, 30},
		{"record without a key", false, 100 - 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			set := config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil)
			set.Templates()[0].LearningModeDuration = 10 * time.Second
			c1, err := coordinator.New(nc, coordinator.Options{Templates: sources.StaticTemplates(set), Term: 1, RoundInterval: coordinator.NoRoundInterval})
			if err != nil {
				t.Fatal(err)
			}
			if err := c1.Start(ctx); err != nil {
				t.Fatal(err)
			}
			e := &env{t: t, nc: nc}
			a := e.get("a", map[string]float64{"db": 70}).GetResponse()[0].GetGets()
			if a.GetCapacity() != 70 {
				t.Fatalf("a got %v", a.GetCapacity())
			}
			c1.Stop()
			kv := stateKV(t, nc)
			rec, err := readRecord(t, kv)
			if err != nil {
				t.Fatal(err)
			}
			if ent := rec.GetResources()["db"]; len(rec.GetHoldersKey()) != ledger.HolderKeySize || ent.GetHolders() != 1 || ent.GetHoldersUntil() == nil || ent.GetCeiling() != 80 {
				t.Fatalf("record %v: want a promise of holder a, a ceiling of 80 and a %d-byte key", rec, ledger.HolderKeySize)
			}
			if !tc.keep {
				rec.HoldersKey = nil
				data, err := wire.Marshal(wire.JSON, rec)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := kv.Put(ctx, "root.leases", data); err != nil {
					t.Fatal(err)
				}
			}

			coordtest.Start(t, nc, coordinator.Options{Templates: sources.StaticTemplates(set), Term: 2, RoundInterval: coordinator.NoRoundInterval})
			ra := e.getReq(&allotpb.GetCapacityRequest{ClientId: "a", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 70, Has: a}}}).GetResponse()[0].GetGets()
			if ra.GetCapacity() != 70 {
				t.Fatalf("a's lease echoed as %v", ra.GetCapacity())
			}
			if got := e.get("b", map[string]float64{"db": 70}).GetResponse()[0].GetGets().GetCapacity(); got != tc.newcome {
				t.Fatalf("newcomer got %v after a came back, want %v", got, tc.newcome)
			}
		})
	}
}
