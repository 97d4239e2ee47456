package coordinator_test

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/replica"
)

// slowDialer dials connections whose reads are limited to a rate of
// bytes per second each, like a link a flood fills: what the server sends
// a connection queues behind what it sent before.
type slowDialer struct{ bytesPerSec int }

func (d slowDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, time.Second)
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, lim: rate.NewLimiter(rate.Limit(d.bytesPerSec), d.bytesPerSec/8)}, nil
}

type slowConn struct {
	net.Conn
	lim *rate.Limiter
}

func (c *slowConn) Read(p []byte) (int, error) {
	if len(p) > c.lim.Burst() {
		p = p[:c.lim.Burst()]
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		_ = c.lim.WaitN(context.Background(), n)
	}
	return n, err
}

// TestLeaderKeepsTermUnderFlood floods the leader's subject with more
// than its connection can carry for several election TTLs. The election's
// keep-alives run on a connection of their own, so they are not queued
// behind the flood: the leader renews through it and keeps its term.
// Sharing the service's connection, the renewals' acknowledgements
// waited behind the flood and the leadership lapsed.
func TestLeaderKeepsTermUnderFlood(t *testing.T) {
	s := natstest.Server(t)
	nc, err := nats.Connect(s.ClientURL(), nats.SetCustomDialer(slowDialer{bytesPerSec: 256 << 10}), nats.Name("flooded"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var lapsed atomic.Bool
	rep, err := coordinator.NewReplica(nc, coordinator.ReplicaOptions{
		Options: coordinator.Options{ServerID: "a", Templates: sources.StaticTemplates(config.NewSet(1, nil, config.DefaultTemplate()))},
		Election: replica.Election{OnServing: func(_ uint64, serving bool) {
			if !serving {
				lapsed.Store(true)
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rep.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	poll.Until(t, 30*time.Second, "the replica to serve", func() bool { return rep.Status().Serving })
	term := rep.Status().Term

	watcher := natstest.Conn(t, s)
	js, _ := jetstream.New(watcher)
	kv, err := js.KeyValue(context.Background(), election.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	seq := func() uint64 {
		e, err := kv.Get(context.Background(), coordinator.DefaultNode)
		if err != nil {
			return 0
		}
		var v election.Value
		_ = json.Unmarshal(e.Value(), &v)
		return v.Seq
	}
	before := seq()

	// 8 MiB: half a minute of the connection's reads, ten TTLs.
	flood := natstest.Conn(t, s)
	payload := make([]byte, 128<<10)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 64 {
			_ = flood.Publish(coordinator.Subject(coordinator.DefaultNode, "capacity.get"), payload)
		}
		_ = flood.Flush()
	})
	wg.Wait()
	// Four renewals past the flood's start: the acknowledgements of those
	// on the service's connection would have waited for the whole flood.
	poll.Until(t, 30*time.Second, "four renewals or a lapse", func() bool { return lapsed.Load() || seq() >= before+4 })
	if lapsed.Load() {
		t.Fatalf("the leader of term %d stopped serving under the flood", term)
	}
	if st := rep.Status(); st.Term != term || !st.Serving {
		t.Fatalf("status %+v after the flood: want term %d, serving", st, term)
	}
	t.Logf("term %d kept through %d renewals during the flood", term, seq()-before)
}

// A holder's refresh is served while a flood of newcomers' gets is still
// being worked off: it has a subscription (capacity.refresh) and a
// connection (Options.Beside) and a place in flight of its own, and
// rounds answer holders first: it is answered before half the flood sent
// before it. Every flood request is answered, with a lease or a 503 and a
// retry_after; none is left to time out. With every request on one
// first-in first-out subscription, the refresh waited for the whole
// flood (it was answered after 9,952 of 10,000).
//
// The coordinator's service connection reads 256 KiB/s, so that the
// flood (about 1.5 MiB) is a backlog at the server however fast the
// machine.
func TestHoldersRefreshThroughAFlood(t *testing.T) {
	s := natstest.Server(t)
	slow, err := nats.Connect(s.ClientURL(), nats.SetCustomDialer(slowDialer{bytesPerSec: 256 << 10}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	e := &env{t: t, nc: natstest.Conn(t, s), srv: s, c: coordtest.Start(t, slow, coordinator.Options{
		RoundInterval: 5 * time.Millisecond,
		Templates:     sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl("*", 100, allotpb.Algorithm_FAIR_SHARE)}, nil)),
		Intake:        intake.Limits{MaxInFlight: 64},
		Beside:        natstest.Conn(t, s),
	})}
	const holders = 4
	leases := make([]*allotpb.Lease, holders)
	for i := range leases {
		resp := e.get("holder-"+strconv.Itoa(i), map[string]float64{"db": 10})
		leases[i] = resp.GetResponse()[0].GetGets()
	}

	const n = 10000
	var ok, refused, other atomic.Int64
	flood := natstest.Conn(t, e.srv)
	inbox := nats.NewInbox()
	sub, err := flood.Subscribe(inbox, func(m *nats.Msg) {
		switch code := m.Header.Get(micro.ErrorCodeHeader); {
		case code == "":
			ok.Add(1)
		case code == "503" && m.Header.Get(leader.HeaderRetryAfter) != "":
			refused.Add(1)
		default:
			other.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	hdr := nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}, leader.HeaderTimeout: {"600000"}}
	// Encoded before any is sent, so that the flood reaches the server at
	// once even on a slow machine, and the refreshes find it still queued.
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		data, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: "flood-" + strconv.Itoa(i),
			Resource: []*allotpb.ResourceRequest{{ResourceId: "flood", Wants: 1}}})
		msgs[i] = &nats.Msg{Subject: coordinator.Subject("root", "capacity.get"), Reply: inbox, Header: hdr, Data: data}
	}
	for _, m := range msgs {
		if err := flood.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := flood.Flush(); err != nil {
		t.Fatal(err)
	}
	answered := func() int64 { return ok.Load() + refused.Load() + other.Load() }
	for i, has := range leases {
		id := "holder-" + strconv.Itoa(i)
		data, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 10, Has: has}}})
		m := &nats.Msg{Subject: coordinator.Subject("root", "capacity.refresh"), Data: data,
			Header: nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}, leader.HeaderClient: {id}}}
		// Counted against what was still queued when the refresh was
		// sent, not against the whole flood: on a busy machine part of
		// the flood is worked off before the first refresh leaves.
		before := answered()
		if i == 0 && n-before < n/4 {
			t.Fatalf("only %d of the %d flood requests were still queued when the first refresh was sent: the flood did not build a backlog", n-before, n)
		}
		r, err := e.nc.RequestMsg(m, time.Minute)
		after := answered()
		if err != nil {
			t.Fatalf("%s's refresh: %v", id, err)
		}
		var resp allotpb.GetCapacityResponse
		if code := r.Header.Get(micro.ErrorCodeHeader); code != "" || proto.Unmarshal(r.Data, &resp) != nil || resp.GetResponse()[0].GetGets().GetCapacity() <= 0 {
			t.Fatalf("%s's refresh: %v %q", id, r.Header, r.Data)
		}
		if queued := n - before; after-before >= queued/2 {
			t.Fatalf("%s's refresh was answered after %d of the %d flood requests queued before it: it did not overtake the flood", id, after-before, queued)
		}
		t.Logf("%s refreshed while %d of the %d flood requests queued before it were answered", id, after-before, n-before)
	}
	poll.Until(t, time.Minute, "every flood request answered", func() bool { return ok.Load()+refused.Load()+other.Load() == n })
	if other.Load() != 0 {
		t.Fatalf("flood: %d leases, %d refused, %d other answers", ok.Load(), refused.Load(), other.Load())
	}
	t.Logf("flood of %d: %d leases, %d refused with 503", n, ok.Load(), refused.Load())
}

// Past its request rate a tenant gets 429 with a retry_after at once, so
// its flood takes only its rate's worth of the places in flight, and
// another tenant's newcomers are served. Every flood request is answered.
func TestTenantFloodLeavesOthersServed(t *testing.T) {
	e := startTenantsLimited(t, map[string][]string{"TENANT_A": {"a"}, "TENANT_B": {"b"}},
		intake.Limits{MaxInFlight: 64, TenantRate: 100, TenantBurst: 100}, tmpl("*", 100, allotpb.Algorithm_FAIR_SHARE))
	const n = 5000
	a := e.as("a")
	var rs faults.Replies
	inbox := a.NewRespInbox()
	sub, err := a.Subscribe(inbox+".*", rs.Count)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	hdr := nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}
	for i := range n {
		data, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: "flood-" + strconv.Itoa(i),
			Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 1}}})
		if err := a.PublishMsg(&nats.Msg{Subject: coordinator.Subject("root", "capacity.get"), Reply: inbox + "." + strconv.Itoa(i), Header: hdr, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	// The server works through the flood before it answers the flush:
	// on a loaded machine that took longer than Flush's 10s.
	if err := a.FlushTimeout(time.Minute); err != nil {
		t.Fatal(err)
	}
	b := e.as("b")
	for i := range 5 {
		data, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: "b-" + strconv.Itoa(i),
			Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 1}}})
		r, err := b.RequestMsg(&nats.Msg{Subject: coordinator.Subject("root", "capacity.get"), Header: hdr, Data: data}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if code := r.Header.Get(micro.ErrorCodeHeader); code != "" {
			t.Fatalf("tenant B's request %d during A's flood: %s %s", i, code, r.Header.Get(micro.ErrorHeader))
		}
	}
	poll.Until(t, time.Minute, "every flood request answered", func() bool { return rs.Total() == n })
	if rs.Limited.Load() == 0 || rs.Other.Load() != 0 {
		t.Fatalf("tenant A's flood: %d leases, %d refused, %d limited, %d other", rs.OK.Load(), rs.Refused.Load(), rs.Limited.Load(), rs.Other.Load())
	}
	t.Logf("tenant A's flood of %d: %d leases, %d refused (503), %d limited (429)", n, rs.OK.Load(), rs.Refused.Load(), rs.Limited.Load())
}
