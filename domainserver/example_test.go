package domainserver_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/domain"
	"github.com/allot/allot/domainserver"
)

// A domain-limits server embedded in a program, with its namespace given
// as the document `allot config put` takes (docs/domains.md), and a
// client holding copies of a copy-limited resource. Only public packages
// are used: a program outside this module can do the same.
func ExampleParseDomains() {
	quiet := slog.New(slog.DiscardHandler)
	// A NATS server; in production, your NATS cluster.
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true})
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

	cfg, err := domainserver.ParseDomains(map[string][]byte{
		"shop": []byte("resources:\n  sandboxes: {kind: copies, domain_limit: 10, global_limit: 20}\n"),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := domainserver.New(nc, domainserver.Options{Config: cfg, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()

	a, err := agent.New(nc, agent.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	d, err := domain.New(a)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	h, err := d.Reserve(ctx, "shop:sandboxes", "acme", 8)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	fmt.Println("acme holds", h.Copies(), "sandboxes")
	_, err = d.Reserve(ctx, "shop:sandboxes", "acme", 5, domain.WithMinCopies(5))
	var rej *domain.RejectedError
	fmt.Println("5 more refused:", errors.As(err, &rej))
	// Output:
	// acme holds 8 sandboxes
	// 5 more refused: true
}
