package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
)

// Request asks for hits of a rate-limited resource for one domain (here a
// tenant), retrying a rejection for up to five seconds (Figure 4 of the
// Charon paper). With no domain service reachable the agent fails open
// and grants the min copies itself.
func ExampleAgent_Request() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	a, err := agent.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	ctx := context.Background()
	g, err := a.Request(ctx, "api:search", "acme", 1, agent.WithMaxWait(5*time.Second))
	var rej *agent.RejectedError
	switch {
	case errors.As(err, &rej):
		fmt.Printf("over the limit (hard limit %d/s, %d hits in the last second)\n", rej.Grant.HardLimit, rej.Grant.DomainHitsLastSecond)
	case err != nil:
		log.Fatal(err) // bad input, or a client error from the service
	case g.Degraded:
		fmt.Println("no domain service; proceeding on a degraded grant:", g.Cause)
	default:
		fmt.Printf("granted in tier %d (burst: %v)\n", g.Tier, g.Burst)
	}
}

// Reserve holds copies of a copy-limited resource; Release gives part of
// them back and Close, deferred, the rest (Figure 5 of the Charon paper).
// The agent keeps the hold alive in the background until then.
func ExampleAgent_Reserve() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	a, err := agent.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	ctx := context.Background()
	h, err := a.Reserve(ctx, "jobs:sandbox", "acme", 10, agent.WithMinCopies(5))
	if err != nil {
		log.Fatal(err) // a *agent.RejectedError when refused
	}
	defer h.Close()
	fmt.Println("holding", h.Copies(), "sandboxes") // 5 to 10
	// … step 1 uses them all …
	if err := h.Release(ctx, h.Copies()/2); err != nil {
		log.Fatal(err)
	}
	// … step 2 uses the rest; Close gives them back.
	if h.Lost() {
		log.Print(h.Err()) // the service dropped the hold: its copies are not held
	}
}

// Transfer stages copies of a hold for another process, which Seize
// turns into a hold of its own (Figure 6 of the Charon paper). The two
// agents can be on different machines; only the transfer id travels
// between them.
func ExampleHold_Transfer() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Process 1.
	p1, err := agent.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	defer p1.Close()
	h, err := p1.Reserve(ctx, "jobs:sandbox", "acme", 15)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	tid, err := h.Transfer(ctx, 10, 30*time.Second) // seize within 30s
	if err != nil {
		log.Fatal(err)
	}
	// send(tid) to process 2; h keeps 5 copies.

	// Process 2.
	p2, err := agent.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	defer p2.Close()
	got, err := p2.Seize(ctx, tid)
	if err != nil {
		log.Fatal(err) // a 404 *agent.ServiceError: unknown or expired id
	}
	defer got.Close()
	fmt.Println("seized", got.Copies(), "copies for", got.Domain())
}

// AcquireAll holds the same number of copies of several resources,
// requesting the rate-limited one last (Figure 7 of the Charon paper).
func ExampleAgent_AcquireAll() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	a, err := agent.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	ctx := context.Background()
	x, err := a.AcquireAll(ctx, "acme", []string{"jobs:sandbox"}, "api:search", 10, 1, agent.WithMaxWait(5*time.Second))
	if err != nil {
		log.Fatal(err) // nothing is held
	}
	defer x.Close()
	fmt.Println("processing", x.Copies, "items")
}
