package agent

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// A single forged reply with the largest term and a lease until 2999
// (a probe: a subscriber on the coordinator's subject answering first) must not lock the agent out of its real coordinator for ever:
// after a few refreshes answered only by the real, lower term, the agent
// follows it again (before the fix it refused every genuine reply).
func TestForgedTermDoesNotLockOut(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	rogue := natstest.Conn(t, s)
	var forged atomic.Int32
	sub, err := rogue.Subscribe("allot.root.capacity.get", func(m *nats.Msg) {
		if !forged.CompareAndSwap(0, 1) {
			return // one forged reply only
		}
		resp := &allotpb.GetCapacityResponse{Term: math.MaxUint64, Response: []*allotpb.ResourceResponse{{
			ResourceId: "poison", Gets: &allotpb.Lease{Capacity: 1e9,
				ExpiryTime: timestamppb.New(time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC))}}}}
		enc := wire.ReplyEncodingOf(m.Header)
		data, err := wire.Marshal(enc, resp)
		if err != nil {
			t.Error(err)
			return
		}
		msg := nats.NewMsg(m.Reply)
		msg.Header = nats.Header{}
		msg.Header.Set(wire.HeaderContentType, enc.ContentType())
		msg.Data = data
		_ = m.RespondMsg(msg)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, natstest.Conn(t, s))
	r, err := a.Rate("poison", WithWants(5))
	if err != nil {
		t.Fatal(err)
	}
	// The rogue answers before the coordinator starts: deterministic.
	poll.Until(t, 30*time.Second, "the forged reply accepted", func() bool { return a.Term() == math.MaxUint64 })
	startCoordinator(t, natstest.Conn(t, s), testTemplate("poison", 10))
	poll.Until(t, 10*time.Second, "the real coordinator followed again", func() bool {
		return a.Term() == 1 && r.Capacity() == 5
	})
}
