package dashboard

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
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
	sts, err := collectStats(ctx, nc, QuotaService, wait, func(st *quotaStats) bool { return st.Node == node && st.Serving })
	var out []QuotaNamespace
	for _, st := range sts {
		for name, ev := range st.Events {
			if n := st.ShadowByNS[name]; n > 0 {
				if ev == nil {
					ev = map[string]uint64{}
				}
				ev["shadow_would_refuse"] = n // listed with the events
			}
			out = append(out, QuotaNamespace{Name: name, Partition: st.Partition, Events: ev})
		}
	}
	slices.SortFunc(out, func(a, b QuotaNamespace) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Name, b.Name))
	})
	return out, err
}
