package domain_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/domain"
	"github.com/allot/allot/agent/internal/demo"
	"github.com/allot/allot/domainserver"
)

// shopConfig is the "shop" namespace of the examples (docs/domains.md):
// 3 API calls per tenant per second, and up to 10 sandboxes per tenant,
// 20 in all.
const shopConfig = `
resources:
  api:
    kind: rate
    hard_limit: 3
    tiers:
      - {limit: 3, window: 1s, active: 1h}
  sandboxes: {kind: copies, domain_limit: 10, global_limit: 20}
`

// demoDomain starts an embedded NATS server and a domain server for the
// shop namespace. It returns a connection and a function that stops
// everything.
func demoDomain() (*nats.Conn, func()) {
	nc, stopServer, err := demo.Server()
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := domainserver.ParseDomains(map[string][]byte{"shop": []byte(shopConfig)})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := domainserver.New(nc, domainserver.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		err = srv.Start(context.Background())
	}
	if err != nil {
		log.Fatal(err)
	}
	return nc, func() { srv.Stop(); stopServer() }
}

// demoClient starts a quiet agent on nc and a domain client of it; done
// closes both, the client first (it gives its holds back).
func demoClient(nc *nats.Conn) (d *domain.Client, done func()) {
	a, err := agent.New(nc, agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	// The default time-out suits a service nearby; the examples may run on
	// a busy test machine, with the race detector.
	d, err = domain.New(a, domain.WithTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	return d, func() { d.Close(); a.Close() }
}

// Request asks for hits of a rate-limited resource for one domain (here
// a tenant). A rejection is an error carrying the answer's context data;
// domain.WithMaxWait would retry it with backoff (Figure 4 of the Charon
// paper). With no domain service reachable the client fails open and
// grants the min copies itself (Grant.Degraded).
func ExampleClient_Request() {
	nc, stop := demoDomain()
	defer stop()
	a, err := agent.New(nc, agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	d, err := domain.New(a, domain.WithTimeout(2*time.Second)) // see demoClient
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		g, err := d.Request(ctx, "shop:api", "acme", 1)
		var rej *domain.RejectedError
		switch {
		case errors.As(err, &rej):
			fmt.Printf("call %d: over the limit (%d of %d/s used)\n", i, rej.Grant.DomainHitsLastSecond, rej.Grant.HardLimit)
		case err != nil:
			log.Fatal(err) // bad input, or a client error from the service
		case g.Degraded:
			fmt.Println("no domain service; proceeding on a degraded grant:", g.Cause)
		default:
			fmt.Printf("call %d: granted\n", i)
		}
	}
	// Output:
	// call 1: granted
	// call 2: granted
	// call 3: granted
	// call 4: over the limit (3 of 3/s used)
}

// Reserve holds copies of a copy-limited resource; Release gives part of
// them back and Close, deferred, the rest (Figure 5 of the Charon paper).
// The client keeps the hold alive in the background until then.
func ExampleClient_Reserve() {
	nc, stop := demoDomain()
	defer stop()
	d, done := demoClient(nc)
	defer done()

	ctx := context.Background()
	h, err := d.Reserve(ctx, "shop:sandboxes", "acme", 15, domain.WithMinCopies(5))
	if err != nil {
		log.Fatal(err) // a *domain.RejectedError when refused
	}
	defer h.Close()
	fmt.Println("holding", h.Copies(), "sandboxes")
	if err := h.Release(ctx, 4); err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", h.Copies(), "sandboxes")
	if err := h.Err(); err != nil {
		log.Print(err) // the service dropped the hold: its copies are not held
	}
	// Output:
	// holding 10 sandboxes
	// holding 6 sandboxes
}

// Transfer stages copies of a hold for another process, which Seize
// turns into a hold of its own (Figure 6 of the Charon paper). The two
// processes can be on different machines; only the transfer id travels
// between them.
func ExampleHold_Transfer() {
	nc, stop := demoDomain()
	defer stop()
	ctx := context.Background()

	// Process 1.
	p1, done1 := demoClient(nc)
	defer done1()
	h, err := p1.Reserve(ctx, "shop:sandboxes", "acme", 10)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	tid, err := h.Transfer(ctx, 6, 30*time.Second) // to be seized within 30s
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("process 1 keeps", h.Copies())
	// send(tid) to process 2.

	// Process 2.
	p2, done2 := demoClient(nc)
	defer done2()
	got, err := p2.Seize(ctx, tid)
	if err != nil {
		log.Fatal(err) // a 404 *agent.ServiceError: unknown or expired id
	}
	defer got.Close()
	fmt.Println("process 2 seized", got.Copies(), "for", got.Domain())
	// Output:
	// process 1 keeps 4
	// process 2 seized 6 for acme
}

// AcquireAll holds the same number of copies of several resources,
// requesting the rate-limited one last (Figure 7 of the Charon paper):
// here up to 5 sandboxes, but only 3 API calls are left this second, so
// 3 of each.
func ExampleClient_AcquireAll() {
	nc, stop := demoDomain()
	defer stop()
	d, done := demoClient(nc)
	defer done()

	ctx := context.Background()
	x, err := d.AcquireAll(ctx, "acme", []string{"shop:sandboxes"}, "shop:api", 5, 1, domain.WithMaxWait(5*time.Second))
	if err != nil {
		log.Fatal(err) // nothing is held
	}
	defer x.Close()
	fmt.Println("processing", x.Copies, "items, holding", x.Holds[0].Copies(), "sandboxes")
	// Output:
	// processing 3 items, holding 3 sandboxes
}
