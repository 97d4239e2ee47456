package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
)

// fetchStats asks the coordinator for its micro STATS and returns its data.
func fetchStats(nc *nats.Conn) (*coordinator.Stats, error) {
	m, err := nc.Request("$SRV.STATS."+coordinator.ServiceName, nil, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("bench: coordinator STATS: %w", err)
	}
	var reply struct {
		Endpoints []struct {
			Data json.RawMessage `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return nil, fmt.Errorf("bench: decode STATS: %w", err)
	}
	for _, e := range reply.Endpoints {
		if len(e.Data) == 0 || string(e.Data) == "null" {
			continue
		}
		var s coordinator.Stats
		if err := json.Unmarshal(e.Data, &s); err == nil && s.Node != "" {
			return &s, nil
		}
	}
	return nil, errors.New("bench: STATS reply has no coordinator data")
}
