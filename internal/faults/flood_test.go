package faults

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot/allot/internal/natstest"
)

// TestLeaderSurvivesAFlood floods the leader, a separate process, with
// newcomers' capacity.get requests from 20,000 ids, as fast as another
// process sends them, and 10 a second of 1,000 resources each, for two
// lease lengths, while ten well-behaved agents hold leases. The leader
// keeps its term (its election has a connection of its own), no agent's
// lease lapses (their refreshes and the lease record have a connection
// of their own, and go first), every flood request is answered with a
// lease or refused with 503 or 429 (none is left to time out: the flood
// says it waits 10 minutes), and the capacity in force never exceeds the
// capacity. Before, requests went first in, first out on one connection
// with the election, and the flood left requests unanswered.
func TestLeaderSurvivesAFlood(t *testing.T) {
	t.Parallel()
	const (
		resource = "held"
		capacity = 100
	)
	lease := 5 * time.Second
	if raceBuild {
		lease = 10 * time.Second // the processes run several times slower
	}
	srv := natstest.Server(t)
	nc := natstest.Conn(t, srv)
	PutTemplate(t, nc, resource, Template(resource, capacity, lease, time.Second, ""))
	StartChild(t, srv.ClientURL(), "flooded")
	term := WaitAnswered(t, nc, 30*time.Second)

	load := StartLoad(t, natstest.Conn(t, srv), "good", 10, resource, capacity, 20)
	var samples, lapsed atomic.Int64
	watch, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watch.Err() == nil {
			samples.Add(1)
			if !load.Leased() {
				lapsed.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	flood := StartFlood(t, srv.ClientURL(), Flood{For: 2 * lease, IDs: 20000, BigPerSecond: 10, Timeout: 10 * time.Minute})
	counts := flood.Wait(t)
	stopWatch()
	<-watched
	after := WaitAnswered(t, nc, 30*time.Second)
	r := load.Sampler.Stop()
	Report(t, "leader_flooded", r, "term_before="+itoa(term), "term_after="+itoa(after),
		"lapsed_samples="+itoa(uint64(lapsed.Load()))+"/"+itoa(uint64(samples.Load())), counts.String())
	if after != term {
		t.Errorf("the flood cost the leader its term: %d, then %d", term, after)
	}
	if lapsed.Load() != 0 {
		t.Errorf("a good agent was without a lease in %d of %d samples during the flood", lapsed.Load(), samples.Load())
	}
	if counts.Answered() != counts.Sent || counts.Other != 0 {
		t.Errorf("flood: %v: want every request answered with a lease, 503 or 429", counts)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
