package agent_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/domain"
	demoserver "github.com/allot/allot/agent/internal/demo"
	"github.com/allot/allot/agent/quota"
)

// demo starts an embedded NATS server and a coordinator that gives
// "mysql/main" 100 per second, "mysql/connections" 10 in flight and each
// "tenant/*" 50 per second. It returns a connection and a function that
// stops everything.
func demo() (*nats.Conn, func(), error) {
	return demoserver.Start(map[string]float64{"mysql/main": 100, "mysql/connections": 10, "tenant/*": 50})
}

// demoAgent starts the demo and an agent on it; stop closes the agent and
// stops the demo.
func demoAgent() (a *agent.Agent, stop func()) {
	nc, stopDemo, err := demo()
	if err != nil {
		log.Fatal(err)
	}
	a, err = agent.New(nc, agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		stopDemo()
		log.Fatal(err)
	}
	return a, func() { a.Close(); stopDemo() }
}

// The three lines a service adds to stay within its share of a global
// limit: create an agent, get a limiter, wait before each request.
func Example() {
	nc, stop, err := demo()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	a, err := agent.New(nc, agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	lim, err := a.Rate("mysql/main", agent.WithWants(40))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if err := lim.Wait(ctx); err != nil { // blocks until the first lease arrives
			log.Fatal(err)
		}
		// ... run the query ...
	}
	st := lim.Status()
	fmt.Printf("%g per second from the %s\n", st.Capacity, st.Source)
	// Output: 40 per second from the lease
}

// A gauge bounds the units in flight; Do holds one while the function runs.
func ExampleGauge_Do() {
	a, stop := demoAgent()
	defer stop()
	conns, err := a.Gauge("mysql/connections", agent.WithWants(4))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = conns.Do(ctx, 1, func(ctx context.Context) error {
		fmt.Println("holding", conns.InFlight(), "of", conns.Limit())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: holding 1 of 4
}

// Per-tenant limiters that come and go: a tenant's limiter is created on
// its first request and closed when the tenant leaves, which gives its
// share back to the coordinator at once; the agent's other resources are
// not affected.
func ExampleRateLimiter_Close() {
	a, stop := demoAgent()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	tenants := map[string]*agent.RateLimiter{}
	for _, name := range []string{"acme", "globex"} {
		lim, err := a.Rate("tenant/"+name, agent.WithWants(20))
		if err != nil {
			log.Fatal(err)
		}
		if err := lim.Wait(ctx); err != nil { // the tenant's first request
			log.Fatal(err)
		}
		tenants[name] = lim
	}
	fmt.Println(len(a.Status()), "tenants,", tenants["acme"].Capacity(), "per second each")

	// acme leaves: its lease is released now, not when it would expire.
	if err := tenants["acme"].Close(); err != nil {
		log.Fatal(err)
	}
	delete(tenants, "acme")
	fmt.Println(len(a.Status()), "tenant,", tenants["globex"].Capacity(), "per second")
	// Output:
	// 2 tenants, 20 per second each
	// 1 tenant, 20 per second
}

// An HTTP middleware that sheds load beyond this instance's share.
func ExampleRateLimiter_Allow() {
	var lim *agent.RateLimiter // from Agent.Rate
	limit := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !lim.Allow() {
				http.Error(w, "over the global limit", http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	_ = limit
}

// Watching capacity changes, e.g. to export them as metrics.
func ExampleWithOnChange() {
	onChange := agent.WithOnChange(func(st agent.Status) {
		slog.Info("capacity changed", "resource", st.ResourceID, "capacity", st.Capacity,
			"source", st.Source, "expiry", st.Expiry, "error", st.LastError)
	})
	_ = onChange // pass to agent.New
}

// One agent for all three of allot's products: leases on the Agent, the
// per-request quota and domain limits on clients made from it, which use
// its connection, client id, node and logger. Each client is closed on
// its own, before the agent's connection (deferred calls run in reverse).
func Example_products() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	a, err := agent.New(nc, agent.WithNode("eu"))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close() // gives the leases back
	q, err := quota.New(a, quota.WithFallback("logins", 5, 10))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close() // sends the reports still pending
	d, err := domain.New(a)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close() // gives the holds back

	ctx := context.Background()
	lim, err := a.Rate("mysql/main") // a lease: decided locally
	if err != nil {
		log.Fatal(err)
	}
	if err := lim.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	// One request to the quota service, with quota's options only.
	if _, err := q.Take(ctx, "logins:alice", 1, quota.Sheddable()); err != nil {
		log.Print(err) // a *quota.RejectedError when refused
	}
	// One request to the domain service, with domain's options only:
	// quota.Sheddable here would not compile.
	h, err := d.Reserve(ctx, "jobs:sandbox", "acme", 2, domain.WithMaxWait(5*time.Second))
	if err != nil {
		log.Fatal(err) // a *domain.RejectedError when refused
	}
	defer h.Close()
}
