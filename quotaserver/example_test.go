package quotaserver_test

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
	"github.com/allot/allot/agent/quota"
	"github.com/allot/allot/quotaserver"
)

// A quota server embedded in a program, with its namespaces given as the
// documents `allot config put` takes (docs/quota.md), and a client taking
// from it. Only public packages are used: a program outside this module
// can do the same.
func ExampleParseNamespaces() {
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

	cfg, err := quotaserver.ParseNamespaces(map[string][]byte{
		"logins": []byte("dynamic_bucket_template: {size: 2, fill_rate: 0.1, wait_timeout: 0s}\n"),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := quotaserver.New(nc, quotaserver.Options{Config: cfg, Logger: quiet})
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
	q, err := quota.New(a)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	for i := 1; i <= 3; i++ {
		_, err := q.Take(ctx, "logins:alice", 1)
		var re *quota.RejectedError
		switch {
		case errors.As(err, &re):
			fmt.Printf("login %d refused: %s\n", i, re.Reason)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("login %d ok\n", i)
		}
	}
	// Output:
	// login 1 ok
	// login 2 ok
	// login 3 refused: no_wait
}
