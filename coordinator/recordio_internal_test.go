package coordinator

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	allotpb "github.com/allot/allot/proto/allotpb"
)

// heldOpen is JetStream whose first bucket lookup after hold is set waits
// until release is closed, past its caller's time-out: a JetStream API
// that answers the one who asks first slowly (a cluster electing its meta
// leader), for as long as the test needs to see who waits behind it.
type heldOpen struct {
	jetstream.JetStream
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *heldOpen) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if h.hold.CompareAndSwap(true, false) {
		close(h.entered)
		<-h.release
	}
	return h.JetStream.KeyValue(ctx, bucket)
}

// A read-back that finds the state bucket gone reopens it off the writer
// goroutine: a proposal submitted meanwhile is written (recreating the
// bucket itself) without waiting for the read-back's slow reopen.
func TestReadBackReopenDoesNotHoldWrites(t *testing.T) {
	nc := natstest.Conn(t, natstest.Server(t))
	real, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	js := &heldOpen{JetStream: real, entered: make(chan struct{}), release: make(chan struct{})}
	opts := Options{Node: "root", Term: 1, ServerID: "s1"}
	if err := opts.fill(); err != nil {
		t.Fatal(err)
	}
	s := newRecordStore(js, opts, slog.New(slog.DiscardHandler))
	if _, err := s.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(func() { close(js.release); s.cancel(); s.wait() })
	record := func() *ledger.Proposal {
		return &ledger.Proposal{Record: &allotpb.LeaseHorizon{Term: 1, ServerId: "s1", Node: "root"}}
	}
	s.submit(record())
	if r := <-s.out; r.err != nil {
		t.Fatalf("first write: %v", r.err)
	}

	js.hold.Store(true)
	if err := real.DeleteKeyValue(context.Background(), opts.StateBucket); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "a read-back to find the bucket gone and reopen it", func() bool {
		select {
		case <-js.entered:
			return true
		default:
			return false
		}
	})
	s.submit(record())
	var got *storeResult
	poll.Until(t, 10*time.Second, "the write submitted during the read-back's reopen", func() bool {
		select {
		case r := <-s.out:
			if r.p != nil {
				got = &r
			}
		default:
		}
		return got != nil
	})
	if got.err != nil {
		t.Fatalf("write during the read-back's reopen: %v", got.err)
	}
}
