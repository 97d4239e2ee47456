package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
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
	var servers []*server.Server
	cluster := func(t *testing.T) (string, jetstream.JetStream) {
		servers = natstest.Cluster(t, 3)
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
			if !waitStateKeys(ctx, t, js, tc.keys) {
				describeStateKeys(t, servers, tc.keys)
				t.FailNow()
			}
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

// waitStateKeys waits until every key is in the state bucket; false
// (and an error reported) when ctx ends first. Each attempt has a
// deadline of its own: a direct get sent while the bucket's stream was
// still forming was once taken by a replica and never answered, and with
// ctx's 2 minutes that one attempt was the whole wait.
func waitStateKeys(ctx context.Context, t *testing.T, js jetstream.JetStream, keys []string) bool {
	t.Helper()
	for _, key := range keys {
		var err error
		if !poll.Ok(time.Until(deadlineOf(ctx)), func() bool {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var kv jetstream.KeyValue
			if kv, err = js.KeyValue(actx, statekv.DefaultBucket); err == nil {
				_, err = kv.Get(actx, key)
			}
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				t.Logf("state key %s: an attempt got no answer in 2s: %v", key, err)
			}
			return err == nil
		}) {
			t.Errorf("state key %s: %v", key, err)
			return false
		}
	}
	return true
}

// deadlineOf is ctx's deadline, or a minute from now.
func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Minute)
}

// describeStateKeys logs what each server says of the state bucket and
// keys: its stream's cluster view, a direct get through a connection to
// that server (answered by a nearby replica) and a get from the stream
// leader, so a failure shows whether a key is missing or only unseen.
func describeStateKeys(t *testing.T, servers []*server.Server, keys []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := "KV_" + statekv.DefaultBucket
	for i, s := range servers {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Logf("server %d: %v", i, err)
			continue
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Logf("server %d: %v", i, err)
			continue
		}
		if st, err := js.Stream(ctx, stream); err != nil {
			t.Logf("server %d: stream: %v", i, err)
		} else if info, err := st.Info(ctx); err != nil {
			t.Logf("server %d: stream info: %v", i, err)
		} else {
			ci, _ := json.Marshal(info.Cluster)
			t.Logf("server %d (%s): state %+v cluster %s", i, s.Name(), info.State, ci)
		}
		for _, key := range keys {
			subject := "$KV." + statekv.DefaultBucket + "." + key
			direct, derr := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
			leader, lerr := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, []byte(`{"last_by_subj":"`+subject+`"}`))
			t.Logf("server %d key %s: direct get %s (%v); leader get %.200s (%v)", i, key, directStatus(direct), derr, leaderBody(leader), lerr)
		}
	}
}

func directStatus(m *nats.Msg) string {
	if m == nil {
		return "no reply"
	}
	if st := m.Header.Get("Status"); st != "" {
		return "status " + st + " " + m.Header.Get("Description")
	}
	return "seq " + m.Header.Get("Nats-Sequence") + " from " + m.Header.Get("Nats-Stream")
}

func leaderBody(m *nats.Msg) string {
	if m == nil {
		return "no reply"
	}
	return string(m.Data)
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
