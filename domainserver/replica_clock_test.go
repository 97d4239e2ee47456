package domainserver_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/replica"
)

// A successor learns until one hold TTL after its term began on its own
// clock (Options.Now), the clock it compares LearnUntil with.
func TestSuccessorLearnsOnItsClock(t *testing.T) {
	s := natstest.Server(t)
	cfg := &config{}
	cfg.set(testNamespace())
	run := func(id string, now func() time.Time) (*domainserver.Replica, func()) {
		r, err := domainserver.NewReplica(natstest.Conn(t, s), domainserver.ReplicaOptions{Options: domainserver.Options{ServerID: id,
			Config: sources.DomainsFunc(cfg.get), HoldTTL: time.Second, Now: now, Logger: slog.New(slog.DiscardHandler)}, Election: replica.Election{TTL: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		poll.Until(t, 20*time.Second, id+" to serve", func() bool { return r.Server() != nil })
		return r, stop
	}
	_, stopA := run("a", nil)
	stopA() // resigns: the partition has had a leader
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	b, _ := run("b", func() time.Time { return at })
	if st := b.Server().Stats(); !st.LearnUntil.Equal(at.Add(time.Second)) || !st.Learning {
		t.Fatalf("learning until %v (learning %v), want %v", st.LearnUntil, st.Learning, at.Add(time.Second))
	}
}
