package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/natstest"
)

// TestBucketReplicas: on a three-server cluster, `allot coordinator
// --bucket-replicas 3` creates the configuration bucket with three
// replicas, as it does the election bucket (it created the
// configuration bucket with one whatever the flag said, so losing that
// one server lost the level's templates), and so does `allot config put
// --create-bucket --bucket-replicas 3`.
func TestBucketReplicas(t *testing.T) {
	servers := natstest.Cluster(t, 3)
	url := natstest.ClusterURL(servers)
	startCoordinator(t, []string{"--nats", url, "--bucket-replicas", "3"}, []string{"--nats", url})
	if code, out, errs := runCLI(t, cliMySQL, "config", "put", "--create-bucket", "--bucket-replicas", "3", "--bucket", "ops_config", "mysql-main", "-", "--nats", url); code != 0 {
		t.Fatalf("config put: %d %s %s", code, out, errs)
	}
	if code, _, errs := runCLI(t, cliMySQL, "config", "put", "--create-bucket", "--bucket-replicas", "0", "mysql-main", "-", "--nats", url); code == 0 || !strings.Contains(errs, "--bucket-replicas 0") {
		t.Errorf("config put --bucket-replicas 0: exit %d, %s", code, errs)
	}

	js, err := jetstream.New(natstest.Conn(t, servers[0]))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// allot_state is not in the list: the domain-limit service may create
	// it before the coordinator does, and it does so with one replica
	// whatever --bucket-replicas says.
	for _, bucket := range []string{configkv.DefaultBucket, election.DefaultBucket, "ops_config"} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		if r := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas; r != 3 {
			t.Errorf("bucket %s has %d replicas, want 3", bucket, r)
		}
	}
}
