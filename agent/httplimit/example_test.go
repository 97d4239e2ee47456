package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/httplimit"
	"github.com/allot/allot/agent/internal/demo"
)

// A service puts its handler behind the middleware; the coordinator (here
// in-process, granting "api/requests" 1 request per second across every
// instance) decides each instance's share, and each request is decided
// locally.
func Example() {
	a, stop, err := demo.Agent(map[string]float64{"api/requests": 1}) // agent.New(nc) on a NATS connection
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	mw, err := httplimit.New(a, httplimit.Options{Key: httplimit.Fixed("api/requests"), Resource: []agent.ResourceOption{agent.WithWants(10)}})
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(mw.Handler(hello))
	defer srv.Close()

	// The first request creates the resource, refused until its first
	// lease comes; wait for that lease and a token (this example only).
	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	lim, _ := a.Rate("api/requests") // the middleware's limiter
	for lim.Tokens() < 1 {
		time.Sleep(10 * time.Millisecond)
	}
	for range 2 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Printf("%d RateLimit-Policy: %s Retry-After: %q\n", resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Policy: "api/requests";q=1;w=1 Retry-After: ""
	// 429 RateLimit-Policy: "api/requests";q=1;w=1 Retry-After: "1"
}
