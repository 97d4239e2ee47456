// Package coordtest starts coordinators for tests: created, started with a
// bounded wait, and stopped when the test ends.
package coordtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/opstatus"
)

// Start creates and starts a coordinator on nc with opts, failing the test
// on error, and stops it at the end of the test.
func Start(tb testing.TB, nc *nats.Conn, opts coordinator.Options) *coordinator.Coordinator {
	tb.Helper()
	c, err := coordinator.New(nc, opts)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// Stats asks the serving coordinator for its micro STATS on nc and
// returns the data of its first endpoint, failing the test on error.
func Stats(tb testing.TB, nc *nats.Conn) coordinator.Stats {
	tb.Helper()
	m, err := nc.Request("$SRV.STATS."+coordinator.ServiceName, nil, 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	st, ok := opstatus.DecodeStats(m.Data, func(s *coordinator.Stats) bool { return s.Node != "" })
	if !ok {
		tb.Fatalf("STATS reply without a coordinator's data: %s", m.Data)
	}
	return st
}
