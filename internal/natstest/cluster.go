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
)

// Cluster starts n JetStream servers routed into one cluster, on random
// loopback ports, and returns once the cluster has a JetStream meta
// leader (buckets with up to n replicas can be created).
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
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return servers
		}
		if time.Now().After(deadline) {
			tb.Fatalf("JetStream cluster not ready after 30s: %v", err)
		}
	}
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
