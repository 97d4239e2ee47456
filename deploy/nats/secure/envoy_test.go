package secure_test

import (
	"context"
	"log/slog"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/rls"
)

// TestCoordinatorServesEnvoy: with the coordinator user's rights, a
// replica elects itself leader of the Envoy counter partition and
// serves it, and a front end (as `allot coordinator --rls-addr` runs one
// per replica, asking the partitions over NATS where they lead in another
// process) decides ShouldRateLimit on those counters: three requests of
// a limit of 3 a minute pass, the fourth is OVER_LIMIT, and the server
// refuses the coordinator user nothing.
func TestCoordinatorServesEnvoy(t *testing.T) {
	d := startDeployment(t)
	nc, errs := d.dial(t, d.srv, "coordinator")
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rep, err := envoyserver.NewReplica(nc, envoyserver.ReplicaOptions{Options: envoyserver.Options{Node: "root", ServerID: "root-1", Partitions: 1, Logger: log}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rep.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	dom, err := config.ParseEnvoy("edge", 1, []byte("domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyrl.NewConfig([]envoyrl.Domain{dom.Domain}, envoyrl.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No Local partitions: every count goes over NATS, as from a replica
	// whose partition is led by another process.
	router, err := envoyserver.NewRouter(nc, envoyserver.RouterOptions{Node: "root", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.Options{Config: func() *envoyrl.Config { return cfg }, Store: router, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client", Value: "alice"}}}}}
	poll.Until(t, wait, "the Envoy partition's leader to answer", func() bool { return rep.Server() != nil })
	var codes []rlspb.RateLimitResponse_Code
	for range 4 {
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v (refused: %v)", err, errs.all())
		}
		codes = append(codes, resp.GetOverallCode())
	}
	want := []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("codes %v, want %v", codes, want)
		}
	}
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("the coordinator user was refused: %v", e)
	}
}
