package quotaserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/quotaserver"
	"github.com/allot/allot/replica"
)

// A successor counts its buckets drained on its own clock (Options.Now),
// the clock its buckets run on.
func TestSuccessorDrainsBucketsOnItsClock(t *testing.T) {
	s := natstest.Server(t)
	src := &staticConfig{cfg: namespaces(&quota.Namespace{Name: "api", Buckets: map[string]*quota.Spec{"k": tokenBucket(5, 2, time.Second)}})}
	a, stopA := runReplica(t, natstest.Conn(t, s), "a", 0, 1, sources.QuotaFunc(src.get))
	waitServing(t, a)
	stopA() // resigns: the partition has had a leader

	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	b, err := quotaserver.NewReplica(natstest.Conn(t, s), quotaserver.ReplicaOptions{
		Options:  quotaserver.Options{ServerID: "b", Config: sources.QuotaFunc(src.get), Logger: quiet(), Now: func() time.Time { return at }},
		Election: replica.Election{TTL: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	poll.Until(t, 20*time.Second, "the successor to serve", func() bool { return b.Server() != nil })
	if st := b.Server().Stats(); st.BucketsStartFull || !st.Since.Equal(at.Add(time.Second)) {
		t.Fatalf("buckets drained at %v (start full %v), want %v: the term's start on the replica's clock plus the longest wait",
			st.Since, st.BucketsStartFull, at.Add(time.Second))
	}
}
