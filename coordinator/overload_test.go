package coordinator_test

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/natstest"
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
		Options: coordinator.Options{ServerID: "a", Templates: coordinator.StaticTemplates(config.NewSet(1, nil, config.DefaultTemplate()))},
		OnServing: func(_ uint64, serving bool) {
			if !serving {
				lapsed.Store(true)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rep.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	faults.WaitFor(t, 30*time.Second, "the replica to serve", func() bool { return rep.Status().Serving })
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
	faults.WaitFor(t, 30*time.Second, "four renewals or a lapse", func() bool { return lapsed.Load() || seq() >= before+4 })
	if lapsed.Load() {
		t.Fatalf("the leader of term %d stopped serving under the flood", term)
	}
	if st := rep.Status(); st.Term != term || !st.Serving {
		t.Fatalf("status %+v after the flood: want term %d, serving", st, term)
	}
	t.Logf("term %d kept through %d renewals during the flood", term, seq()-before)
}
