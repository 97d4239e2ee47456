package coordinator_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
)

// A coordinator embedded in a program, with its templates given as the
// documents `allot config put` takes (docs/configuration.md), and an
// agent that gets a lease from it. Only public packages are used: a
// program outside this module can do the same.
func ExampleParseTemplates() {
	quiet := slog.New(slog.DiscardHandler)
	// A NATS server with JetStream, where the coordinator keeps its lease
	// record; in production, your NATS cluster.
	dir, err := os.MkdirTemp("", "allot-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("the NATS server did not start")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	templates, err := coordinator.ParseTemplates(map[string][]byte{
		"db": []byte("identifier_glob: db/*\ncapacity: 100\nalgorithm: {kind: FAIR_SHARE, lease_length: 10s, refresh_interval: 1s}\n"),
	})
	if err != nil {
		log.Fatal(err)
	}
	c, err := coordinator.New(nc, coordinator.Options{Templates: templates, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Stop()

	a, err := agent.New(nc, agent.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	lim, err := a.Rate("db/main", agent.WithWants(40))
	if err != nil {
		log.Fatal(err)
	}
	if err := lim.Wait(ctx); err != nil { // the first lease
		log.Fatal(err)
	}
	fmt.Printf("%g per second from the %s\n", lim.Status().Capacity, lim.Status().Source)
	// Output: 40 per second from the lease
}
