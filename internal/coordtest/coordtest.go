// Package coordtest starts coordinators for tests: created, started with a
// bounded wait, and stopped when the test ends.
package coordtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
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
	var reply struct {
		Endpoints []struct {
			Data coordinator.Stats `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil || len(reply.Endpoints) == 0 {
		tb.Fatalf("STATS %s: %v", m.Data, err)
	}
	return reply.Endpoints[0].Data
}
