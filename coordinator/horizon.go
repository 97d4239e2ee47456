package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// The lease horizon is how a coordinator knows whether leases it does not
// know about may be outstanding. Before it hands out a lease that would
// expire after the recorded horizon, the coordinator writes a later horizon
// to the state bucket (key "<node>.leases"); so at any moment every lease
// ever issued for the node expires no later than the recorded horizon.
//
// On start, a coordinator that finds no record knows the deployment is new
// and no leases exist: it skips learning mode. One that finds a horizon in
// the past knows all earlier leases have expired: it skips learning mode
// too. Otherwise each resource learns until the earlier of the horizon and
// start + learning_mode_duration.

// clockSkewMargin is added to a recorded horizon before comparing it with
// this coordinator's clock: clocks of replicas may differ by up to this much.
const clockSkewMargin = 2 * time.Second

type horizonState struct {
	learningCap int64 // unix ns: leases of a predecessor may exist until then; 0 none
	until       int64 // unix ns: no lease we issue may expire after this
	retryAt     int64 // unix ns: after a failed write, the next attempt
}

func (c *Coordinator) horizonKey() string { return c.opts.Node + ".leases" }

func (c *Coordinator) loadHorizon(ctx context.Context) error {
	entry, err := c.kv.Get(ctx, c.horizonKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		c.log.Info("no lease horizon recorded: new deployment, learning mode skipped")
		return nil
	}
	if err != nil {
		return fmt.Errorf("coordinator: read lease horizon %s/%s: %w", c.opts.StateBucket, c.horizonKey(), err)
	}
	var h allotpb.LeaseHorizon
	if err := protojson.Unmarshal(entry.Value(), &h); err != nil || h.GetHorizon() == nil {
		// A damaged record must not be read as "no leases": assume the
		// worst, learn for the full learning duration.
		c.log.Warn("lease horizon record unreadable; learning mode for full duration", "err", err)
		c.horizon.learningCap = c.started.Add(100 * 365 * 24 * time.Hour).UnixNano()
		return nil
	}
	// Allow for clock skew between the writer and us.
	hz := h.GetHorizon().AsTime().Add(clockSkewMargin).UnixNano()
	if hz <= c.started.UnixNano() {
		c.log.Info("lease horizon in the past: all earlier leases expired, learning mode skipped", "horizon", h.GetHorizon().AsTime())
		return nil
	}
	c.horizon.learningCap = hz
	c.horizon.until = hz
	c.log.Info("leases of a predecessor may be outstanding: learning mode", "until", h.GetHorizon().AsTime())
	return nil
}

// ensureHorizon makes sure leases expiring at need may be issued, writing a
// later horizon if needed. It returns the horizon in force.
func (c *Coordinator) ensureHorizon(now, need int64, leaseMax time.Duration) int64 {
	if need <= c.horizon.until || now < c.horizon.retryAt {
		return c.horizon.until
	}
	// Extend by twice the longest lease so writes are rare.
	until := max(need, now+2*int64(leaseMax))
	rec := &allotpb.LeaseHorizon{
		Node:     c.opts.Node,
		Term:     c.Term(),
		ServerId: c.opts.ServerID,
		Horizon:  timestamppb.New(time.Unix(0, until)),
	}
	data, err := protojson.Marshal(rec)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = c.kv.Put(ctx, c.horizonKey(), data)
		cancel()
	}
	if err != nil {
		c.horizon.retryAt = now + int64(time.Second)
		c.stats.horizonErrors++
		c.log.Error("cannot record lease horizon; leases are cut short to the recorded one", "err", err)
		return c.horizon.until
	}
	c.horizon.until = until
	return until
}
