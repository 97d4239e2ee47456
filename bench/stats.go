package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/quotaserver"
)

// fetchStats asks the coordinator for its micro STATS and returns its data.
func fetchStats(nc *nats.Conn) (*coordinator.Stats, error) {
	m, err := nc.Request("$SRV.STATS."+coordinator.ServiceName, nil, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("bench: coordinator STATS: %w", err)
	}
	st, ok := opstatus.DecodeStats(m.Data, func(s *coordinator.Stats) bool { return s.Node != "" })
	if !ok {
		return nil, errors.New("bench: STATS reply has no coordinator data")
	}
	return &st, nil
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
		if s, ok := opstatus.DecodeStats(m.Data, func(s *quotaserver.Stats) bool { return s.Partition >= 0 && s.Partition < partitions }); ok {
			takes[s.Partition] = max(takes[s.Partition], s.Takes)
		}
	}
}

// fetchDomainStats asks the domain server for its micro STATS and returns
// its data.
func fetchDomainStats(nc *nats.Conn) (*domainserver.Stats, error) {
	m, err := nc.Request("$SRV.STATS."+domainserver.ServiceName, nil, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("bench: domain STATS: %w", err)
	}
	st, ok := opstatus.DecodeStats(m.Data, func(s *domainserver.Stats) bool { return s.Node != "" })
	if !ok {
		return nil, errors.New("bench: STATS reply has no domain server data")
	}
	return &st, nil
}
