package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/grpclimit"
	"github.com/allot/allot/agent/internal/demo"
)

// A server adds the interceptors; the coordinator (here in-process,
// granting each method 1 call per second across every instance) decides
// each instance's share, and each call is decided locally.
func Example() {
	a, stop, err := demo.Agent(map[string]float64{"grpc/*": 1}) // agent.New(nc) on a NATS connection
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	l, err := grpclimit.New(a, grpclimit.Options{Key: grpclimit.Method("grpc/"), Resource: []agent.ResourceOption{agent.WithWants(10)}})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(l.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The first call creates the resource, refused until its first lease
	// comes; wait for that lease and a token (this example only).
	client.Check(ctx, &healthpb.HealthCheckRequest{})
	lim, _ := a.Rate("grpc/grpc.health.v1.Health/Check") // the interceptor's limiter
	for lim.Tokens() < 1 {
		time.Sleep(10 * time.Millisecond)
	}
	for range 2 {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		st := status.Convert(err)
		retry := false
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
				retry = true // the client may try again after the delay
			}
		}
		fmt.Printf("%v, retry info: %v\n", st.Code(), retry)
	}
	// Output:
	// OK, retry info: false
	// ResourceExhausted, retry info: true
}
