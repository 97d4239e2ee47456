package coordinator_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/netcut"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// A lease-record write whose reply comes after the writer's time-out
// (2 s) may still land. The writer then reads back a record it did not
// expect, but it is its own: it is written again (the ledger took the
// write for failed, so the record stored may be below what it grants),
// and it is not counted or logged as someone else's.
func TestLateWriteIsNotForeign(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	link, err := netcut.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	beside, err := nats.Connect("nats://"+link.Addr(), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(beside.Close)
	tm := &config.Template{Name: "t-db", Glob: "db", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: 5 * time.Second, Floor: config.DefaultFloor()}
	coordtest.Start(t, nc, coordinator.Options{
		Templates:     sources.StaticTemplates(config.NewSet(1, []*config.Template{tm}, nil)),
		RoundInterval: 5 * time.Millisecond,
		Beside:        beside,
		Logger:        slog.Default(),
	})
	get := func(client string) {
		t.Helper()
		req := &allotpb.GetCapacityRequest{ClientId: client, Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 10}}}
		data, _ := proto.Marshal(req)
		msg := nats.NewMsg(coordinator.Subject("root", "capacity.get"))
		msg.Data = data
		msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
		if _, err := nc.RequestMsg(msg, 20*time.Second); err != nil {
			t.Fatalf("%s: %v", client, err)
		}
	}
	get("first")
	poll.Until(t, time.Minute, "the first record written", func() bool { return coordtest.Stats(t, nc).RecordWrites >= 1 })

	// A newcomer's grant needs a record; its write reaches the server
	// only after the writer stopped waiting for it.
	link.SetDelay(3 * time.Second)
	get("second")
	poll.Until(t, time.Minute, "a record write that timed out", func() bool { return coordtest.Stats(t, nc).HorizonErrors >= 1 })
	link.SetDelay(0)
	st0 := coordtest.Stats(t, nc)
	poll.Until(t, time.Minute, "the record written again", func() bool {
		return coordtest.Stats(t, nc).RecordWrites > st0.RecordWrites
	})
	if st := coordtest.Stats(t, nc); st.ForeignRecords != 0 {
		t.Fatalf("STATS foreign_records = %d after our own late write landed; want 0", st.ForeignRecords)
	}
}
