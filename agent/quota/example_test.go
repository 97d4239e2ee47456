package quota_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/demo"
	"github.com/allot/allot/agent/quota"
	"github.com/allot/allot/internal/quotatest"
)

// demoQuota starts an embedded NATS server and the quota service with
// namespaces (name → JSON document, as put with `allot config put`). It
// returns a connection and a function that stops everything. The
// service's clock stands still: the buckets hold what the takes left,
// and the examples print the same however slow the machine (at 0.1/s, a
// take half a second late changed the retry printed).
func demoQuota(namespaces map[string]string) (*nats.Conn, func(), error) {
	nc, stopServer, err := demo.Server()
	if err != nil {
		return nil, nil, err
	}
	at := time.Now()
	svc, err := quotatest.NewClocked(nc, func() time.Time { return at }, namespaces)
	if err != nil {
		stopServer()
		return nil, nil, err
	}
	return nc, func() { svc.Close(); stopServer() }, nil
}

// Take asks for a token at the moment of use: here three logins per user,
// one more every ten seconds. The fourth is REJECTED, an error value that
// says why and when to retry.
func ExampleClient_Take() {
	nc, stop, err := demoQuota(map[string]string{
		"logins": `{"dynamic_bucket_template": {"size": 3, "fill_rate": 0.1, "wait_timeout": "0s"}}`,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	a, err := agent.New(nc, agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	// The default time-out (250 ms) suits a service nearby; this example
	// may run on a busy test machine, with the race detector.
	q, err := quota.New(a, quota.WithTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 1; i <= 4; i++ {
		res, err := q.Take(ctx, "logins:alice", 1)
		var re *quota.RejectedError
		switch {
		case errors.As(err, &re):
			fmt.Printf("login %d refused (%s), retry in about %v\n", i, re.Reason, re.RetryAfter.Round(time.Second))
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("login %d ok, %d of %d left\n", i, res.Remaining, res.Limit)
		}
	}
	// Output:
	// login 1 ok, 2 of 3 left
	// login 2 ok, 1 of 3 left
	// login 3 ok, 0 of 3 left
	// login 4 refused (no_wait), retry in about 10s
}
