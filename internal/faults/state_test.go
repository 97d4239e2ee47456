package faults

import (
	"context"
	"errors"
	"math"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/proto/allotpb"
)

func TestMain(m *testing.M) {
	ChildMain()
	os.Exit(m.Run())
}

// The standard load of the state scenarios: capacity 60,
// ten agents wanting 10 each, short leases so that the leader's horizon
// runs out within seconds of its record becoming unwritable.
const (
	stdResource = "fault"
	stdCapacity = 60
	stdAgents   = 10
	stdWants    = 10
	stdLease    = 2 * time.Second
	stdRefresh  = 500 * time.Millisecond
)

const recordKey = coordinator.DefaultNode + ".leases"

// stdSetup starts a server, the standard template, one replica and the
// standard agents, waits until every agent holds a lease, and starts the
// sampler.
func stdSetup(t *testing.T) (js jetstream.JetStream, s *Sampler, leased func() bool) {
	t.Helper()
	srv := natstest.Server(t)
	nc := natstest.Conn(t, srv)
	PutTemplate(t, nc, "fault", Template(stdResource, stdCapacity, stdLease, stdRefresh, ""))
	rep := StartReplica(t, srv.ClientURL(), "r1")
	WaitServing(t, 15*time.Second, rep)
	load := StartLoad(t, natstest.Conn(t, srv), "agent", stdAgents, stdResource, stdCapacity, stdWants)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, load.Sampler, load.Leased
}

// recordPresent reports whether the lease record can be read.
func recordPresent(js jetstream.JetStream) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, coordinator.DefaultStateBucket)
	if err != nil {
		return false
	}
	e, err := kv.Get(ctx, recordKey)
	return err == nil && len(e.Value()) > 0
}

// runStateFault injects fault into a serving leader's state, keeps the
// load going for four lease lengths (the recorded horizon reaches at most
// 3L+R ahead, under four with the refresh shorter than the lease), then
// expects the record back and every agent leased again.
func runStateFault(t *testing.T, scenario string, fault func(ctx context.Context, js jetstream.JetStream) error) {
	js, s, leased := stdSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := fault(ctx, js); err != nil {
		t.Fatalf("inject fault: %v", err)
	}
	time.Sleep(4 * stdLease) // the scenario's length, not a wait for a condition
	recreated := poll.Ok(4*time.Second, func() bool { return recordPresent(js) })
	recovered := poll.Ok(4*time.Second, leased)
	Report(t, scenario, s.Stop(), "record_recreated="+yes(recreated), "agents_leased_again="+yes(recovered))
	if !recreated {
		t.Errorf("%s: the lease record %s/%s was not written again", scenario, coordinator.DefaultStateBucket, recordKey)
	}
	if !recovered {
		t.Errorf("%s: the agents did not all get unexpired, positive leases again", scenario)
	}
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func stateKV(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, coordinator.DefaultStateBucket)
	if err != nil {
		return nil, err
	}
	if _, err := kv.Get(ctx, recordKey); err != nil {
		return nil, errors.Join(errors.New("no lease record before the fault"), err)
	}
	return kv, nil
}

// TestStateKeyDeleted deletes the lease record under a serving leader:
// its compare-and-set must not keep failing until its
// horizon runs out and the agents fall to a safe capacity computed as if
// each were alone.
func TestStateKeyDeleted(t *testing.T) {
	t.Parallel()
	runStateFault(t, "state-key-deleted", func(ctx context.Context, js jetstream.JetStream) error {
		kv, err := stateKV(ctx, js)
		if err != nil {
			return err
		}
		return kv.Delete(ctx, recordKey)
	})
}

// TestStateKeyPurged is TestStateKeyDeleted with a purge, which also
// drops the key's history.
func TestStateKeyPurged(t *testing.T) {
	t.Parallel()
	runStateFault(t, "state-key-purged", func(ctx context.Context, js jetstream.JetStream) error {
		kv, err := stateKV(ctx, js)
		if err != nil {
			return err
		}
		return kv.Purge(ctx, recordKey)
	})
}

// TestStateBucketDeleted deletes the whole state bucket under a serving
// leader: the same as a deleted record, for an unavailable bucket.
func TestStateBucketDeleted(t *testing.T) {
	t.Parallel()
	runStateFault(t, "state-bucket-deleted", func(ctx context.Context, js jetstream.JetStream) error {
		if _, err := stateKV(ctx, js); err != nil {
			return err
		}
		return js.DeleteKeyValue(ctx, coordinator.DefaultStateBucket)
	})
}

// runFailoverFault serves the standard load from a leader in a child
// process with leases of 6s, applies fault to the state bucket, kills the
// leader with SIGKILL while its leases are still valid, and expects the
// in-process successor to serve within the capacity while they run out,
// and to lease every agent again.
func runFailoverFault(t *testing.T, scenario string, fault func(ctx context.Context, kv jetstream.KeyValue) error) {
	const lease = 6 * time.Second
	srv := natstest.Server(t)
	nc := natstest.Conn(t, srv)
	PutTemplate(t, nc, "fault", Template(stdResource, stdCapacity, lease, time.Second, ""))
	leader := StartChild(t, srv.ClientURL(), "leader")
	WaitAnswered(t, nc, 30*time.Second)
	successor := StartReplica(t, srv.ClientURL(), "successor")
	load := StartLoad(t, natstest.Conn(t, srv), "agent", stdAgents, stdResource, stdCapacity, stdWants)

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := stateKV(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if err := fault(ctx, kv); err != nil {
		t.Fatalf("inject fault: %v", err)
	}
	leader.Signal(t, syscall.SIGKILL)
	killed := time.Now()
	serves := poll.Ok(15*time.Second, func() bool { return successor.Status().Serving })
	time.Sleep(time.Until(killed.Add(lease))) // the scenario's length: the dead leader's leases run out
	recovered := poll.Ok(4*time.Second, load.Leased)
	Report(t, scenario, load.Sampler.Stop(), "successor_serves="+yes(serves), "agents_leased_again="+yes(recovered))
	if !serves {
		t.Errorf("%s: the successor does not serve 15s after the leader was killed", scenario)
	}
	if !recovered {
		t.Errorf("%s: the agents did not all get unexpired, positive leases from the successor", scenario)
	}
}

// TestLeaderKilled is the baseline of the failover scenarios: the leader
// is killed with its record intact. It needs none of the record's repairs;
// it shows that the sampler reports no excess where none exists.
func TestLeaderKilled(t *testing.T) {
	t.Parallel()
	runFailoverFault(t, "leader-killed", func(context.Context, jetstream.KeyValue) error { return nil })
}

// TestStateKeyDeletedThenFailover deletes the lease record and kills the
// leader at once. The successor finds no record but must
// not read that as a new deployment.
func TestStateKeyDeletedThenFailover(t *testing.T) {
	t.Parallel()
	runFailoverFault(t, "state-key-deleted-failover", func(ctx context.Context, kv jetstream.KeyValue) error {
		return kv.Delete(ctx, recordKey)
	})
}

// TestStateRecordRewrittenThenFailover rewrites the lease record, as an
// operator's `nats kv put` may, before the leader is killed: a record claiming that every lease has expired must not make
// the successor skip learning, and a record with a term no election can
// have issued must be reported and ignored, not stop every replica.
func TestStateRecordRewrittenThenFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(h *allotpb.LeaseHorizon)
	}{
		{"past-horizon", func(h *allotpb.LeaseHorizon) {
			h.Horizon = timestamppb.New(time.Now().Add(-time.Hour))
			h.Resources, h.Complete = nil, true
		}},
		{"impossible-term", func(h *allotpb.LeaseHorizon) { h.Term = math.MaxUint64 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runFailoverFault(t, "state-record-"+tc.name+"-failover", func(ctx context.Context, kv jetstream.KeyValue) error {
				e, err := kv.Get(ctx, recordKey)
				if err != nil {
					return err
				}
				var h allotpb.LeaseHorizon
				if err := protojson.Unmarshal(e.Value(), &h); err != nil {
					return err
				}
				tc.edit(&h)
				data, err := protojson.Marshal(&h)
				if err != nil {
					return err
				}
				_, err = kv.Put(ctx, recordKey, data)
				return err
			})
		})
	}
}
