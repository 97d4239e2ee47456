package configkv

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/natstest"
)

// replicasOf returns the replica count of kv's stream.
func replicasOf(t *testing.T, kv jetstream.KeyValue) int {
	t.Helper()
	st, err := kv.Status(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas
}

// TestBucketReplicas: on a three-server cluster OpenBucket creates the
// bucket with the replicas asked for (one by default), and leaves an
// existing bucket's as they are.
func TestBucketReplicas(t *testing.T) {
	servers := natstest.Cluster(t, 3)
	js, err := jetstream.New(natstest.Conn(t, servers[0]))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	kv, err := OpenBucket(ctx, js, "", true, Replicas(3))
	if err != nil {
		t.Fatal(err)
	}
	if r := replicasOf(t, kv); r != 3 {
		t.Errorf("created with Replicas(3): %d replicas", r)
	}
	if kv, err = OpenBucket(ctx, js, "", true, Replicas(1)); err != nil {
		t.Fatal(err)
	} else if r := replicasOf(t, kv); r != 3 {
		t.Errorf("reopened with Replicas(1): %d replicas, want the 3 it has", r)
	}
	if kv, err = OpenBucket(ctx, js, "allot_config_plain", true); err != nil {
		t.Fatal(err)
	} else if r := replicasOf(t, kv); r != 1 {
		t.Errorf("created without Replicas: %d replicas, want 1", r)
	}
}

// createRecorder records the bucket configurations CreateKeyValue is
// asked for, and creates them with one replica: what a single server can
// hold.
type createRecorder struct {
	jetstream.JetStream
	asked []jetstream.KeyValueConfig
}

func (r *createRecorder) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	r.asked = append(r.asked, cfg)
	cfg.Replicas = 1
	return r.JetStream.CreateKeyValue(ctx, cfg)
}

// TestMirrorReplicas: OpenMirror creates a child level's mirror with the
// replicas asked for.
func TestMirrorReplicas(t *testing.T) {
	root := natstest.Root(t, "global")
	bucket(t, root.Server)
	region := natstest.Child(t, "eu", root)
	js, err := jetstream.New(natstest.Conn(t, region.Server))
	if err != nil {
		t.Fatal(err)
	}
	rec := &createRecorder{JetStream: js}
	if _, err := OpenMirror(testCtx(t), rec, DefaultBucket, "global", Replicas(3)); err != nil {
		t.Fatal(err)
	}
	if len(rec.asked) != 1 || rec.asked[0].Mirror == nil || rec.asked[0].Replicas != 3 {
		t.Fatalf("OpenMirror asked for %+v, want one mirror with 3 replicas", rec.asked)
	}
}
