package dashboard

import (
	"context"
	"encoding/json"
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
			var st T
			if len(raw) == 0 || json.Unmarshal(raw, &st) != nil || !keep(&st) {
				continue
			}
			out = append(out, st)
			return // every endpoint carries the same data
		}
	})
	return out, err
}
