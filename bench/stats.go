package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/quotaserver"
)

// fetchStats asks the coordinator for its micro STATS and returns its data.
func fetchStats(nc *nats.Conn) (*coordinator.Stats, error) {
	m, err := nc.Request("$SRV.STATS."+coordinator.ServiceName, nil, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("bench: coordinator STATS: %w", err)
	}
	var st *coordinator.Stats
	err = statsData(m.Data, func(data []byte) bool {
		var s coordinator.Stats
		if json.Unmarshal(data, &s) == nil && s.Node != "" {
			st = &s
		}
		return st != nil
	})
	if err != nil || st != nil {
		return st, err
	}
	return nil, errors.New("bench: STATS reply has no coordinator data")
}

// statsData calls f with the data of each endpoint of a micro STATS reply
// until f returns true.
func statsData(reply []byte, f func(data []byte) bool) error {
	var r struct {
		Endpoints []struct {
			Data json.RawMessage `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(reply, &r); err != nil {
		return fmt.Errorf("bench: decode STATS: %w", err)
	}
	for _, e := range r.Endpoints {
		if len(e.Data) > 0 && string(e.Data) != "null" && f(e.Data) {
			return nil
		}
	}
	return nil
}

// fetchQuotaTakes asks every quota server for its micro STATS (each
// partition's leader answers) and returns the takes each partition
// decided, by partition, gathering replies for wait.
func fetchQuotaTakes(nc *nats.Conn, partitions int, wait time.Duration) ([]uint64, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("bench: quota STATS: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.STATS."+quotaserver.ServiceName, inbox, nil); err != nil {
		return nil, fmt.Errorf("bench: quota STATS: %w", err)
	}
	takes := make([]uint64, partitions)
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return takes, nil // the wait is over
		}
		err = statsData(m.Data, func(data []byte) bool {
			var s quotaserver.Stats
			if json.Unmarshal(data, &s) == nil && s.Partition >= 0 && s.Partition < partitions {
				takes[s.Partition] = max(takes[s.Partition], s.Takes)
				return true
			}
			return false
		})
		if err != nil {
			return nil, err
		}
	}
}
