// Command ratelimited-http is a small HTTP service that stays within its
// fair share of a global request rate managed by allot.
//
// Run it against a NATS deployment with a coordinator:
//
//	go run ./examples/ratelimited-http -nats nats://127.0.0.1:4222 -resource api/search
//
// or fully in-process (embedded NATS server and coordinator, 5 requests per
// second shared by every instance):
//
//	go run ./examples/ratelimited-http -demo
//
// The demo also serves the embedded coordinator's live dashboard on
// http://127.0.0.1:9464/ (-dashboard to move it): send requests to GET /
// and watch the allocation move.
//
// GET / answers 200 within the share and 429 beyond it; GET /wait waits
// for a token (up to 2s) instead of refusing; GET /status shows the lease.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/dashboard"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimited-http:", err)
		os.Exit(1)
	}
}

func run() error {
	natsURL := flag.String("nats", nats.DefaultURL, "NATS server URL")
	resource := flag.String("resource", "api/search", "allot resource id")
	addr := flag.String("addr", "127.0.0.1:8080", "HTTP listen address")
	demo := flag.Bool("demo", false, "run an embedded NATS server and coordinator (capacity 5/s)")
	dashAddr := flag.String("dashboard", "127.0.0.1:9464", "with -demo: where to serve the embedded coordinator's live dashboard (empty: nowhere)")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	url := *natsURL
	if *demo {
		d, err := startDemo(ctx, *resource, *dashAddr, log)
		if err != nil {
			return err
		}
		defer d.stop()
		url = d.natsURL
	}
	nc, err := nats.Connect(url, nats.Name("ratelimited-http"))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer nc.Close()

	// The three lines: an agent, a limiter, and Allow/Wait in the handler.
	a, err := agent.New(nc, agent.WithLogger(log), agent.WithOnChange(func(st agent.Status) {
		log.Info("capacity changed", "resource", st.ResourceID, "capacity", st.Capacity, "source", st.Source)
	}))
	if err != nil {
		return err
	}
	defer a.Close()
	lim, err := a.Rate(*resource)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if !lim.Allow() {
			http.Error(w, "over this instance's share of the global limit", http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /wait", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := lim.Wait(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := lim.Status()
		errText := ""
		if st.LastError != nil {
			errText = st.LastError.Error()
		}
		capacity := any(st.Capacity)
		if math.IsInf(st.Capacity, 1) {
			capacity = "unlimited"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"resource": st.ResourceID, "capacity": capacity, "source": st.Source.String(),
			"mode": st.Mode.String(), "expiry": st.Expiry, "wants": st.Wants, "last_error": errText,
		})
	})

	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("serving", "addr", *addr, "resource", *resource, "client_id", a.ClientID())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// demo is the embedded deployment of -demo.
type demo struct {
	natsURL string
	dashURL string // "" without a dashboard
	stop    func()
}

// startDemo runs an embedded NATS server and a coordinator that gives
// resource 5 requests per second, and serves its dashboard on dashAddr.
// It uses only allot's public packages, as a service outside this
// module would.
func startDemo(ctx context.Context, resource, dashAddr string, log *slog.Logger) (*demo, error) {
	// The template, as `allot config put` would store it.
	doc, err := json.Marshal(map[string]any{
		"identifier_glob": resource, "capacity": 5,
		"algorithm": map[string]any{"kind": "FAIR_SHARE", "lease_length": "10s", "refresh_interval": "1s"},
	})
	if err != nil {
		return nil, err
	}
	templates, err := coordinator.ParseTemplates(map[string][]byte{"demo": doc})
	if err != nil {
		return nil, err
	}
	s, stopServer, err := startNATS()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		stopServer()
		return nil, err
	}
	c, err := coordinator.New(nc, coordinator.Options{Templates: templates, Logger: log})
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		nc.Close()
		stopServer()
		return nil, fmt.Errorf("start coordinator: %w", err)
	}
	dashURL, stopDash, err := serveDashboard(ctx, c, nc, dashAddr, log)
	if err != nil {
		c.Stop()
		nc.Close()
		stopServer()
		return nil, err
	}
	return &demo{natsURL: s.ClientURL(), dashURL: dashURL, stop: func() { stopDash(); c.Stop(); nc.Close(); stopServer() }}, nil
}

// startNATS runs an in-process nats-server with JetStream (the
// coordinator keeps its lease record there) on a free loopback port,
// storing into a temporary directory that stop removes.
func startNATS() (*server.Server, func(), error) {
	dir, err := os.MkdirTemp("", "ratelimited-http")
	if err != nil {
		return nil, nil, err
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("nats-server: %w", err)
	}
	stop := func() { s.Shutdown(); s.WaitForShutdown(); os.RemoveAll(dir) }
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		stop()
		return nil, nil, errors.New("nats-server: not ready for connections after 10s")
	}
	return s, stop, nil
}

// serveDashboard serves the live dashboard of c on addr ("" none) until
// the returned function is called, and returns its URL.
func serveDashboard(ctx context.Context, c *coordinator.Coordinator, nc *nats.Conn, addr string, log *slog.Logger) (string, func(), error) {
	if addr == "" {
		return "", func() {}, nil
	}
	d, err := dashboard.New(dashboard.Options{Source: c, Conn: nc, Logger: log})
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("dashboard: %w (-dashboard to choose another address)", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = d.Run(ctx)
	}()
	srv := &http.Server{Handler: d.Handler(""), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	url := "http://" + l.Addr().String() + "/"
	log.Info("dashboard", "url", url)
	return url, func() {
		cancel() // ends the event streams, so Shutdown does not wait on them
		<-runDone
		sctx, done := context.WithTimeout(context.Background(), 2*time.Second)
		defer done()
		_ = srv.Shutdown(sctx)
	}, nil
}
