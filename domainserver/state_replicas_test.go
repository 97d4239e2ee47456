package domainserver_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/replica"
)

// TestStateBucketReplicas: on a three-server cluster, a domain replica
// that reaches the state bucket before any coordinator creates it with
// the replicas of the node's buckets, and keeps the revisions the
// coordinators' lease records need. It created it with one replica and
// one revision whatever --bucket-replicas said, so in most fresh starts
// losing that one server lost the lease records of the whole level.
func TestStateBucketReplicas(t *testing.T) {
	servers := natstest.Cluster(t, 3)
	nc := natstest.Conn(t, servers[0])
	cfg := &config{}
	cfg.set(testNamespace())
	r, err := domainserver.NewReplica(nc, domainserver.ReplicaOptions{
		Options:  domainserver.Options{ServerID: "d1", Config: sources.DomainsFunc(cfg.get), Logger: slog.New(slog.DiscardHandler)},
		Election: replica.Election{Replicas: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	poll.Until(t, 30*time.Second, "the domain replica to serve", func() bool { return r.Server() != nil })

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	kv, err := js.KeyValue(sctx, domainserver.DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(sctx)
	if err != nil {
		t.Fatal(err)
	}
	cfgGot := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	if cfgGot.Replicas != 3 || st.History() < 2 {
		t.Errorf("state bucket created by the domain service: %d replicas, history %d; want 3 replicas and the history of the lease records", cfgGot.Replicas, st.History())
	}
}
