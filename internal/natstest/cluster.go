package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/poll"
)

// Cluster starts n JetStream servers routed into one cluster, on random
// loopback ports, and returns once the cluster can place a stream of n
// replicas (every server's JetStream is a peer online).
func Cluster(tb testing.TB, n int) []*server.Server {
	tb.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	// Started together: a server's JetStream waits for its peers' routes.
	servers := make([]*server.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() {
			servers[i], errs[i] = embed.Start(embed.Options{
				StoreDir: tb.TempDir(), ServerName: fmt.Sprintf("s%d", i),
				Cluster: &server.ClusterOpts{Name: "allot-test", Host: "127.0.0.1", Port: ports[i]},
				Routes:  routes,
			})
		})
	}
	wg.Wait()
	tb.Cleanup(func() {
		for _, s := range servers {
			if s != nil {
				s.Shutdown()
				s.WaitForShutdown()
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			tb.Fatalf("start cluster: %v", err)
		}
	}
	nc, err := nats.Connect(ClusterURL(servers))
	if err != nil {
		tb.Fatalf("connect to the cluster: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	// A meta leader is not enough: a stream of n replicas needs every
	// server's JetStream online as a peer ("no suitable peers for
	// placement, peer offline" before that). Place one and remove it.
	poll.For(tb, 30*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "natstest_placement", Subjects: []string{"natstest.placement"},
			Storage: jetstream.MemoryStorage, Replicas: n}); err != nil {
			return fmt.Errorf("JetStream cluster cannot place %d replicas yet: %w", n, err)
		}
		if err := js.DeleteStream(ctx, "natstest_placement"); err != nil {
			return fmt.Errorf("remove the placement probe: %w", err)
		}
		return nil
	})
	return servers
}

// ClusterURL returns the client URLs of servers, comma-separated, as
// nats.Connect and allot's --nats take them.
func ClusterURL(servers []*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}
