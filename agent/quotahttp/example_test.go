package quotahttp_test

import (
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/quota"
	"github.com/allot/allot/agent/quotahttp"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/quotatest"
)

// Two requests per client address, then 429 with Retry-After and the
// RateLimit-* headers.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "quotahttp-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := embed.Start(embed.Options{StoreDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer s.WaitForShutdown()
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	// The namespace, as `allot config put` would store it. (The
	// service's clock stands still here, so that the output does not
	// depend on the machine's speed.)
	at := time.Now()
	svc, err := quotatest.NewClocked(nc, func() time.Time { return at }, map[string]string{
		"api": `{"dynamic_bucket_template": {"size": 2, "fill_rate": 0.2, "wait_timeout": "0s"}}`,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Close()

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
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	handler := quotahttp.New(q, quotahttp.RemoteIP("api"))(hello)

	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.7:51000"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		h := w.Header()
		fmt.Printf("%d RateLimit-Limit=%s RateLimit-Remaining=%s RateLimit-Reset=%s Retry-After=%q\n", w.Code,
			h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"), h.Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Limit=2 RateLimit-Remaining=1 RateLimit-Reset=0 Retry-After=""
	// 200 RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=0 Retry-After=""
	// 429 RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=5 Retry-After="5"
}
