package faults

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/natstest"
)

func TestMain(m *testing.M) {
	ChildMain()
	os.Exit(m.Run())
}

// The standard load of the state scenarios (issue 9, item 1): capacity 60,
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
	agents := StartAgents(t, natstest.Conn(t, srv), "agent", stdAgents, stdResource, stdWants)
	s = NewSampler(stdResource, stdCapacity)
	s.Add(agents...)
	s.Start(t)
	WaitFor(t, 10*time.Second, "every agent to hold a lease", func() bool { return Leased(agents, stdResource) })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, s, func() bool { return Leased(agents, stdResource) }
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
// load going for four lease lengths (the horizon covers at most two), then
// expects the record back and every agent leased again.
func runStateFault(t *testing.T, scenario string, fault func(ctx context.Context, js jetstream.JetStream) error) {
	js, s, leased := stdSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := fault(ctx, js); err != nil {
		t.Fatalf("inject fault: %v", err)
	}
	time.Sleep(4 * stdLease) // the scenario's length, not a wait for a condition
	recreated := Eventually(4*time.Second, func() bool { return recordPresent(js) })
	recovered := Eventually(4*time.Second, leased)
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

// TestStateKeyDeleted deletes the lease record under a serving leader
// (issue 9, item 1): its compare-and-set must not keep failing until its
// horizon runs out and the agents fall to a safe capacity computed as if
// each were alone.
func TestStateKeyDeleted(t *testing.T) {
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
	runStateFault(t, "state-key-purged", func(ctx context.Context, js jetstream.JetStream) error {
		kv, err := stateKV(ctx, js)
		if err != nil {
			return err
		}
		return kv.Purge(ctx, recordKey)
	})
}

// TestStateBucketDeleted deletes the whole state bucket under a serving
// leader (issue 9, item 1, "the same for an unavailable state bucket").
func TestStateBucketDeleted(t *testing.T) {
	runStateFault(t, "state-bucket-deleted", func(ctx context.Context, js jetstream.JetStream) error {
		if _, err := stateKV(ctx, js); err != nil {
			return err
		}
		return js.DeleteKeyValue(ctx, coordinator.DefaultStateBucket)
	})
}
