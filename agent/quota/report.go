package quota

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

const (
	// maxPendingReports bounds the buckets gathered between two report
	// flushes; reaching it flushes at once.
	maxPendingReports = 4096
	// flushTimeout bounds how long Close waits for the server to take
	// the last reports.
	flushTimeout = 2 * time.Second
)

// Report charges n tokens of bucket after the fact (quotaservice's
// post-accounting): for work whose cost is known only once done. It never
// blocks and is never rejected: reports are summed per bucket and sent in
// the background every WithReportInterval as a QuotaReportBatch to
// allot.<node>.quota.report.<namespace>.<name>, and on Close. They are
// published without a reply, so a report made while the service is down
// is lost; while a namespace's circuit is open its fallback bucket is
// charged as well. A malformed bucket, a negative n or one above
// 10^12 (the most the service takes in one report) is an error and
// changes nothing; n = 0 does nothing. Reports of one bucket summed
// between two sends charge at most 10^12.
func (c *Client) Report(bucket string, n int64) error {
	ns, _, err := splitBucket(bucket)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("quota: report %d tokens of %q: tokens must not be negative", n, bucket)
	}
	if n > wire.MaxQuotaTokens {
		// The service ignores a report above it: refuse it here, where
		// the caller hears of it.
		return fmt.Errorf("quota: report %d tokens of %q: the most one report may charge is %d", n, bucket, int64(wire.MaxQuotaTokens))
	}
	if n == 0 {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return agent.ErrClosed
	}
	open := false
	if st := c.ns[ns]; st != nil {
		open = !st.openUntil.IsZero()
	}
	old := c.pending[bucket]
	// Saturate at the most the service takes in one report: a sum above
	// it would be ignored whole.
	c.pending[bucket] = old + min(n, wire.MaxQuotaTokens-old)
	full := len(c.pending) >= maxPendingReports
	c.mu.Unlock()
	if open {
		if b := c.fallbackFor(ns); b != nil {
			b.charge(clock.Now(c.clock), n)
		}
	}
	if full {
		c.flushReports() // bounded memory: send now rather than grow
		return nil
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

// reportLoop sends the reports gathered, at most one flush per interval.
func (c *Client) reportLoop() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		timerC, stop := clock.NewTimer(c.clock, c.o.reportInterval)
		select {
		case <-c.stop:
			stop()
			return
		case <-timerC:
		}
		c.flushReports()
	}
}

// flushReports publishes the pending reports, one message per bucket so
// that each reaches the partition that owns the bucket, and returns how
// many buckets it sent.
func (c *Client) flushReports() int {
	c.mu.Lock()
	pending := c.pending
	if len(pending) == 0 {
		c.mu.Unlock()
		return 0
	}
	c.pending = make(map[string]int64)
	c.mu.Unlock()
	var firstErr error
	failed := 0
	for bucket, n := range pending {
		ns, name, _ := strings.Cut(bucket, ":")
		b := &allotpb.QuotaReportBatch{ClientId: c.clientID, Reports: []*allotpb.QuotaReport{{Bucket: bucket, Tokens: n}}}
		data, err := wire.Marshal(wire.Protobuf, b)
		if err == nil {
			msg := nats.NewMsg(c.subj + ".report." + ns + "." + name)
			msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
			msg.Data = data
			err = c.nc.PublishMsg(msg)
		}
		if err != nil {
			failed++
			firstErr = cmp.Or(firstErr, err)
		}
	}
	if firstErr != nil {
		c.log.Warn("allot: quota reports not sent", "buckets", failed, "error", firstErr)
	}
	return len(pending) - failed
}
