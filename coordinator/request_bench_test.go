package coordinator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// BenchmarkGetCapacity measures a GetCapacity request's whole way
// through a coordinator on an in-process NATS server, as `allot bench
// load` sends them (newcomers' plain requests for one of 8 resources,
// 64 in flight), with the same payloads answered by a bare echo beside
// it: the difference between the two is the coordinator's cost per
// request, the figure to compare before and after a change (count its
// instructions with valgrind, which the machine's load disturbs less
// than time).
func BenchmarkGetCapacity(b *testing.B) {
	s := natstest.Server(b)
	nc := natstest.Conn(b, s)
	tmpl := &config.Template{Name: "bench", Glob: "*", Capacity: 1e9, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: time.Minute, RefreshInterval: 10 * time.Second, Floor: config.DefaultFloor()}
	coordtest.Start(b, nc, coordinator.Options{RoundInterval: coordinator.NoRoundInterval,
		Templates: sources.StaticTemplates(config.NewSet(1, nil, tmpl))})
	echo := natstest.Conn(b, s)
	hdr := nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}
	if _, err := echo.Subscribe("bench.echo", func(m *nats.Msg) {
		_ = echo.PublishMsg(&nats.Msg{Subject: m.Reply, Header: hdr, Data: m.Data})
	}); err != nil {
		b.Fatal(err)
	}
	for _, enc := range []wire.Encoding{wire.Protobuf, wire.JSON} {
		ct := wire.ContentProtobuf
		if enc == wire.JSON {
			ct = wire.ContentJSON
		}
		var reqs [][]byte
		for client := range 256 {
			data, err := wire.Marshal(enc, &allotpb.GetCapacityRequest{ClientId: fmt.Sprintf("load-client-%06d", client),
				Resource: []*allotpb.ResourceRequest{{ResourceId: fmt.Sprintf("load/resource-%03d", client%8), Wants: 10}}})
			if err != nil {
				b.Fatal(err)
			}
			reqs = append(reqs, data)
		}
		for _, to := range []string{"echo", "coordinator"} {
			subject := "bench.echo"
			if to == "coordinator" {
				subject = coordinator.Subject(coordinator.DefaultNode, "capacity.get")
			}
			b.Run(enc.String()+"/"+to, func(b *testing.B) {
				sendAll(b, s.ClientURL(), subject, ct, reqs)
			})
		}
	}
}

// sendAll sends b.N requests to subject, cycling through reqs, keeping
// 64 in flight, and waits for every answer.
func sendAll(b *testing.B, url, subject, ct string, reqs [][]byte) {
	const inFlight = 64
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	slots := make(chan struct{}, inFlight)
	failed := make(chan string, 1)
	inbox := nats.NewInbox()
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			select {
			case failed <- code + " " + m.Header.Get("Nats-Service-Error"):
			default:
			}
		}
		<-slots
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	hdr := nats.Header{wire.HeaderContentType: {ct}}
	b.ResetTimer()
	for i := range b.N {
		slots <- struct{}{}
		if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Header: hdr, Data: reqs[i%len(reqs)]}); err != nil {
			b.Fatal(err)
		}
	}
	for range inFlight {
		slots <- struct{}{}
	}
	b.StopTimer()
	select {
	case e := <-failed:
		b.Fatalf("error reply: %s", e)
	default:
	}
}
