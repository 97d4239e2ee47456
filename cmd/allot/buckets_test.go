package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/statekv"
)

// TestBucketReplicas: on a three-server cluster, `allot coordinator
// --bucket-replicas 3` creates every bucket of the level (configuration,
// election, state) with three replicas, whichever of its services
// reaches a bucket first: the coordinator alone (no domain service), the
// domain-limits service alone (the coordinator cannot lead), or both
// racing. The configuration bucket once got one replica whatever the
// flag said, and the state bucket got one whenever the domain service
// created it (four fresh starts in six), so losing that one server lost
// the level's templates or lease records. Without --election-ttl the
// election TTL is the one a replicated election bucket needs. `allot config put
// --create-bucket --bucket-replicas 3` creates its bucket with three too.
func TestBucketReplicas(t *testing.T) {
	// Each case starts on a fresh cluster: deleting the buckets of the
	// case before and creating them again at once left a key write into
	// the new bucket unanswered now and then (the test waited 2 minutes
	// for the lease record, or for the domain seal, of a service that
	// served).
	cluster := func(t *testing.T) (string, jetstream.JetStream) {
		servers := natstest.Cluster(t, 3)
		js, err := jetstream.New(natstest.Conn(t, servers[0]))
		if err != nil {
			t.Fatal(err)
		}
		return natstest.ClusterURL(servers), js
	}
	for _, tc := range []struct {
		name string
		args []string
		// blocked: a candidate that never answers holds the coordinator's
		// election key, so the coordinator never leads.
		blocked bool
		// keys are the state bucket keys whose presence shows the
		// services that wrote it have started.
		keys []string
	}{
		// A 5 s TTL: with 1 s the leader of a three-replica election
		// bucket lapsed again and again on a loaded machine and no term
		// lasted long enough to write its lease record in 2 minutes.
		{"coordinator-first", []string{"--quota-serve", "none", "--election-ttl", "5s"}, false, []string{"root.leases"}},
		{"domain-first", []string{"--election-ttl", "1s"}, true, []string{"root.domain.seal"}},
		// No --election-ttl: replicated buckets get election.ReplicatedTTL.
		{"race", nil, false, []string{"root.leases", "root.domain.seal"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			url, js := cluster(t)
			faults.WaitPlacement(ctx, t, js)
			if tc.blocked {
				kv, err := election.Bucket(ctx, js, election.DefaultBucket, time.Second, 3)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := kv.Create(ctx, "root", []byte(`{"id":"blocker","nonce":"x","seq":0}`), jetstream.KeyTTL(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			stop := runBackground(t, append([]string{"coordinator", "--nats", url, "--bucket-replicas", "3", "--log-level", "info"}, tc.args...))
			defer stop()
			waitStateKeys(ctx, t, js, tc.keys)
			for _, bucket := range []string{configkv.DefaultBucket, election.DefaultBucket, statekv.DefaultBucket} {
				if r := bucketReplicas(ctx, t, js, bucket); r != 3 {
					t.Errorf("bucket %s has %d replicas, want 3", bucket, r)
				}
			}
			if !tc.blocked {
				// The election bucket's marker TTL is the TTL it was
				// created with.
				want := election.ReplicatedTTL
				if i := slices.Index(tc.args, "--election-ttl"); i >= 0 {
					var err error
					if want, err = time.ParseDuration(tc.args[i+1]); err != nil {
						t.Fatal(err)
					}
				}
				kv, err := js.KeyValue(ctx, election.DefaultBucket)
				if err != nil {
					t.Fatal(err)
				}
				st, err := kv.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := st.LimitMarkerTTL(); got != want {
					t.Errorf("election TTL %v, want %v", got, want)
				}
			}
		})
	}

	t.Run("config-put", func(t *testing.T) {
		url, js := cluster(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		faults.WaitPlacement(ctx, t, js)
		if code, out, errs := runCLI(t, cliMySQL, "config", "put", "--create-bucket", "--bucket-replicas", "3", "--bucket", "ops_config", "mysql-main", "-", "--nats", url); code != 0 {
			t.Fatalf("config put: %d %s %s", code, out, errs)
		}
		if code, _, errs := runCLI(t, cliMySQL, "config", "put", "--create-bucket", "--bucket-replicas", "0", "mysql-main", "-", "--nats", url); code == 0 || !strings.Contains(errs, "--bucket-replicas 0") {
			t.Errorf("config put --bucket-replicas 0: exit %d, %s", code, errs)
		}
		if r := bucketReplicas(ctx, t, js, "ops_config"); r != 3 {
			t.Errorf("bucket ops_config has %d replicas, want 3", r)
		}
	})
}

// runBackground runs the CLI with args until the returned function is
// called (or the test ends); a non-zero exit fails the test.
func runBackground(t *testing.T, args []string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var out string
	go func() {
		defer close(done)
		var code int
		if code, out = runCtx(ctx, args...); code != 0 {
			t.Errorf("%s exited %d: %s", strings.Join(args[:1], " "), code, out)
		}
	}()
	stop := func() { cancel(); <-done }
	t.Cleanup(func() {
		stop()
		// What the command said is the only account of why it did not
		// do what a test waited for (say, a term that never lasted).
		if t.Failed() {
			t.Logf("%s output:\n%s", strings.Join(args[:1], " "), out)
		}
	})
	return stop
}

// waitStateKeys waits until every key is in the state bucket.
func waitStateKeys(ctx context.Context, t *testing.T, js jetstream.JetStream, keys []string) {
	t.Helper()
	for _, key := range keys {
		for {
			kv, err := js.KeyValue(ctx, statekv.DefaultBucket)
			if err == nil {
				_, err = kv.Get(ctx, key)
			}
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("state key %s: %v", key, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// bucketReplicas returns the replica count of bucket.
func bucketReplicas(ctx context.Context, t *testing.T, js jetstream.JetStream, bucket string) int {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas
}
