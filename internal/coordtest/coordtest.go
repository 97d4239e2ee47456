// Package coordtest starts coordinators for tests: created, started with a
// bounded wait, and stopped when the test ends.
package coordtest

import (
	"context"
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
