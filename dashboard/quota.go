package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/opstatus"
)

// quotaStats is the part of a quota server's STATS data the dashboard
// reads: its node, partition and per-namespace event counters.
type quotaStats struct {
	Node      string                       `json:"node"`
	Partition int                          `json:"partition"`
	Serving   bool                         `json:"serving"`
	Events    map[string]map[string]uint64 `json:"events"`
	// ShadowByNS counts, per namespace in shadow mode, the takes answered
	// OK that the bucket refused or made wait.
	ShadowByNS map[string]uint64 `json:"shadow_would_refuse_by_namespace"`
}

// gatherQuota asks every instance of QuotaService for its STATS and
// returns the namespaces that serving instances of node report, sorted by
// partition and name. No answer is no namespaces, not an error.
func gatherQuota(ctx context.Context, nc *nats.Conn, node string, wait time.Duration) ([]QuotaNamespace, error) {
	var out []QuotaNamespace
	err := opstatus.Collect(ctx, nc, QuotaService, wait, func(data []byte) {
		var reply struct {
			Data      json.RawMessage `json:"data"`
			Endpoints []struct {
				Data json.RawMessage `json:"data"`
			} `json:"endpoints"`
		}
		if json.Unmarshal(data, &reply) != nil {
			return
		}
		raws := []json.RawMessage{reply.Data}
		for _, e := range reply.Endpoints {
			raws = append(raws, e.Data)
		}
		for _, raw := range raws {
			var st quotaStats
			if len(raw) == 0 || json.Unmarshal(raw, &st) != nil || st.Node != node || !st.Serving {
				continue
			}
			for name, ev := range st.Events {
				if n := st.ShadowByNS[name]; n > 0 {
					if ev == nil {
						ev = map[string]uint64{}
					}
					ev["shadow_would_refuse"] = n // listed with the events
				}
				out = append(out, QuotaNamespace{Name: name, Partition: st.Partition, Events: ev})
			}
			return // every endpoint carries the same data
		}
	})
	slices.SortFunc(out, func(a, b QuotaNamespace) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Name, b.Name))
	})
	return out, err
}
