package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/quota"
	"github.com/allot/allot/agent/quotahttp"
	"github.com/allot/allot/internal/poll"
)

// TestUpAgentTake is the newcomer's path end to end: `allot up
// --quota-partitions 2`, a namespace put with `allot config put`, then the
// agent's Take and the HTTP middleware answered by the partition leaders
// exactly as configured.
func TestUpAgentTake(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--quota-partitions", "2")
	doc := `{"dynamic_bucket_template": {"size": 2, "fill_rate": 0.01, "wait_timeout": "0s"}}`
	for _, ns := range []string{"logins", "api"} {
		if code, out, errs := runCLI(t, doc, "config", "put", "--nats", up.url, "namespaces."+ns, "-"); code != 0 {
			t.Fatalf("config put namespaces.%s: exit %d: %s%s", ns, code, out, errs)
		}
	}
	nc, err := nats.Connect(up.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The takes below must be the service's answers: the default quota
	// timeout (250ms) may pass under -race on a loaded machine, and the
	// client would then decide without it.
	a, err := agent.New(nc, agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	q, err := quota.New(a, quota.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Partitions elect their leaders and load the namespaces after `up`
	// reports it is up, each on its own schedule: peek every key the test
	// uses (they may sit on different partitions) until it is answered as
	// configured.
	for _, key := range []string{"logins:alice", "api:203_0_113_5"} {
		poll.For(t, 20*time.Second, 50*time.Millisecond, func() error {
			if res, err := q.Take(ctx, key, 0); err != nil || res.Limit != 2 {
				return fmt.Errorf("%s not served: %+v, %v", key, res, err)
			}
			return nil
		})
	}
	for i := range 2 {
		if res, err := q.Take(ctx, "logins:alice", 1); err != nil || res.Remaining != int64(1-i) || res.Fallback {
			t.Fatalf("take %d: %+v, %v", i, res, err)
		}
	}
	var qe *quota.RejectedError
	if _, err := q.Take(ctx, "logins:alice", 1); !errors.As(err, &qe) || qe.Reason != "no_wait" || qe.RetryAfter < 50*time.Second {
		t.Fatalf("third take: %v; want REJECTED no_wait (wait_timeout 0s), retry in about 100s", err)
	}

	h := quotahttp.New(q, quotahttp.RemoteIP("api"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	codes := []int{}
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
		r.RemoteAddr = "203.0.113.5:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
		if w.Code == http.StatusTooManyRequests && (w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit-Limit") != "2") {
			t.Errorf("429 headers: %v", w.Header())
		}
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("middleware codes %v, want 200 200 429", codes)
	}
	up.wait(t)
}
