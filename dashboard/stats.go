package dashboard

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/opstatus"
)

// collectStats asks every instance of service for its micro STATS and
// returns, per reply, the first of its data that decodes into T and that
// keep accepts. micro puts a stats handler's result in each endpoint's
// "data"; a top-level "data" is read too. No answer is no entries, not an
// error.
func collectStats[T any](ctx context.Context, nc *nats.Conn, service string, wait time.Duration, keep func(*T) bool) ([]T, error) {
	var out []T
	err := opstatus.Collect(ctx, nc, service, wait, func(data []byte) {
		if st, ok := opstatus.DecodeStats(data, keep); ok {
			out = append(out, st)
		}
	})
	return out, err
}
