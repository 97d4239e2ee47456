package main

import (
	"runtime/metrics"
	"testing"
	"time"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// TestHeapFloorFlag: `allot coordinator --heap-floor 1GiB` raises GOGC
// for its small heap beyond what the default floor (64MiB, which the
// other coordinators of this test process keep) ever sets, and sets it
// back when it stops.
func TestHeapFloorFlag(t *testing.T) {
	s := natstest.Server(t)
	gogc := func() uint64 {
		m := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(m)
		return m[0].Value.Uint64()
	}
	stop := startCoordinator(t, []string{"--nats", s.ClientURL(), "--heap-floor", "1GiB"}, []string{"--nats", s.ClientURL()})
	// 1600 is the most a floor of 64MiB sets (its GOGC for a live heap
	// below 4MiB).
	poll.Until(t, time.Minute, "GOGC above what a 64MiB floor sets", func() bool { return gogc() > 1600 })
	stop()
	poll.Until(t, time.Minute, "GOGC back at most at the default floor's", func() bool { return gogc() <= 1600 })
}
