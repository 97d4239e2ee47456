package main

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/natstest"
)

// TestCoordinatorBucketReplicas: `allot coordinator --bucket-replicas 3`
// on a three-server cluster creates the configuration bucket with three
// replicas, as it does the election and state buckets. It created the
// configuration bucket with one whatever the flag said, so losing that
// one server lost every level's templates.
func TestCoordinatorBucketReplicas(t *testing.T) {
	servers := natstest.Cluster(t, 3)
	url := natstest.ClusterURL(servers)
	startCoordinator(t, []string{"--nats", url, "--bucket-replicas", "3"}, []string{"--nats", url})

	js, err := jetstream.New(natstest.Conn(t, servers[0]))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, bucket := range []string{configkv.DefaultBucket, election.DefaultBucket, coordinator.DefaultStateBucket} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		if r := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas; r != 3 {
			t.Errorf("bucket %s has %d replicas, want 3 (--bucket-replicas 3)", bucket, r)
		}
	}
}
