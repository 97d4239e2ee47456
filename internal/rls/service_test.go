package rls_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/envoywire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/rls"
	"github.com/allot/allot/replica"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// cluster is a NATS server with n mapped Envoy partitions, each led by a
// replica in this process, and a watcher of the configuration bucket.
type cluster struct {
	srv      *server.Server
	kv       jetstream.KeyValue
	watcher  *configkv.Watcher
	replicas []*envoyserver.Replica
}

// startCluster starts it; the partitions read the clock now (nil: the
// wall clock).
func startCluster(t *testing.T, n int, now func() time.Time) *cluster {
	t.Helper()
	srv, err := embed.Start(embed.Options{StoreDir: t.TempDir(), Mappings: envoywire.Mappings("root", n)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	c := &cluster{srv: srv}
	nc := natstest.Conn(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.kv, err = configkv.OpenBucket(ctx, js, configkv.DefaultBucket, true); err != nil {
		t.Fatal(err)
	}
	c.watcher = configkv.NewWatcher(c.kv, nil, quiet())
	if err := c.watcher.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.watcher.Stop)
	for p := range n {
		r, err := envoyserver.NewReplica(natstest.Conn(t, srv), envoyserver.ReplicaOptions{
			Options:  envoyserver.Options{ServerID: fmt.Sprintf("p%d", p), Partition: p, Partitions: n, Logger: quiet(), Now: now},
			Election: replica.Election{TTL: 10 * time.Second}, // a keep-alive late on a loaded machine must not depose a leader mid-scenario
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
		c.replicas = append(c.replicas, r)
	}
	for _, r := range c.replicas {
		poll.Until(t, 10*time.Second, "the envoy partitions to serve", r.Serving)
	}
	return c
}

// router returns a Router of the cluster: in process beside its leaders,
// or over NATS only.
func (c *cluster) router(t *testing.T, inProcess bool) *envoyserver.Router {
	t.Helper()
	opts := envoyserver.RouterOptions{}
	if inProcess {
		opts.Partitions = len(c.replicas)
		opts.Local = func(p int) *envoyserver.Server { return c.replicas[p].Server() }
	}
	r, err := envoyserver.NewRouter(natstest.Conn(t, c.srv), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitDomains waits until the watcher serves every domain of names.
func (c *cluster) waitDomains(t *testing.T, names []string) {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("domains %v to load", names), func() bool {
		ds := c.watcher.Current().EnvoyDomains()
		for _, n := range names {
			if ds[n] == nil {
				return false
			}
		}
		return true
	})
}

// replayRecorded replays every recorded scenario at its recorded
// instants (clock) through a Service per profile deciding with store,
// over real gRPC, each scenario on domains of its own (named with tag),
// and compares every reply with the reference's.
func replayRecorded(t *testing.T, c *cluster, clock *stepClock, store envoyrl.Store, rec *recording, tag string) {
	t.Helper()
	clients := map[string]rlspb.RateLimitServiceClient{}
	for name, p := range profiles {
		svc, err := rls.New(rls.Options{Config: rls.WatchedConfig(c.watcher), Store: store, Decide: p.opts, Logger: quiet(), Now: clock.now})
		if err != nil {
			t.Fatal(err)
		}
		clients[name] = serveGRPC(t, svc)
	}
	for i, sc := range rec.Scenarios {
		rename := suffix(fmt.Sprintf("%s_%d", tag, i))
		c.waitDomains(t, putDomains(t, c.kv, rename))
		for j, st := range steps(t, sc, rename) {
			clock.set(st.Unix)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, err := clients[sc.Profile].ShouldRateLimit(ctx, st.req)
			cancel()
			checkReply(t, label(sc, j, st), st, got, err)
		}
	}
}

// serveGRPC serves svc on a loopback port until the test ends and returns
// a client of it, as Envoy's ext ratelimit filter is one.
func serveGRPC(t *testing.T, svc *rls.Service) rlspb.RateLimitServiceClient {
	t.Helper()
	s, err := rls.Listen("127.0.0.1:0", quiet())
	if err != nil {
		t.Fatal(err)
	}
	svc.Register(s.GRPC())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// TestReferenceRecordingOverGRPC replays the reference's recorded
// scenarios through real gRPC (go-control-plane's generated client, as
// Envoy sends them) to a Service whose counters live in two mapped
// partitions' leaders, at the recorded instants, with the reference's
// configuration files stored under envoy.<domain>, and compares every
// reply field by field: counted in process beside the leaders, and over
// NATS.
func TestReferenceRecordingOverGRPC(t *testing.T) {
	rec := loadRecording(t)
	// The partitions decide when counters expire, on the same clock.
	clock := &stepClock{}
	c := startCluster(t, 2, clock.now)
	for _, mode := range []struct {
		name      string
		inProcess bool
	}{{"in process", true}, {"over NATS", false}} {
		t.Run(mode.name, func(t *testing.T) {
			replayRecorded(t, c, clock, c.router(t, mode.inProcess), rec, fmt.Sprintf("_%t", mode.inProcess))
		})
	}
	var local, remote uint64
	for _, r := range c.replicas {
		st := r.Server().Stats()
		local, remote = local+st.Local, remote+st.Requests
	}
	if local == 0 || remote == 0 {
		t.Errorf("counted %d times in process and %d over NATS: want both", local, remote)
	}
}

// TestHealth: the gRPC server answers the standard health service.
func TestHealth(t *testing.T) {
	s, err := rls.Listen("127.0.0.1:0", quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", resp, err)
	}
}
