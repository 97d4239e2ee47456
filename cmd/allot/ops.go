package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/version"
	"github.com/allot/allot/metrics"
)

// DefaultUpMetricsAddr is where `allot up` serves /metrics, /healthz and
// /readyz unless told otherwise.
const defaultUpMetricsAddr = "127.0.0.1:9464"

// opsState is what the ops endpoints report on: the replicas this
// process runs, each with its NATS connection.
type opsState struct {
	maxResources int // see metrics.Options
	// conn is the process's NATS connection: the dashboard lists the
	// node's replicas and quota namespaces over it (nil: it does not).
	conn *nats.Conn
	// dashboard guards the dashboard (hosts, token); dashboardOff is set
	// when it is not served for want of a token.
	dashboard    dashboardFlags
	dashboardOff bool

	mu       sync.Mutex
	replicas []opsReplica
	domains  []*domainserver.Replica
}

type opsReplica struct {
	nc  *nats.Conn
	rep *coordinator.Replica
}

// add registers a replica running on nc until the returned function is
// called.
func (s *opsState) add(nc *nats.Conn, rep *coordinator.Replica) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replicas = append(s.replicas, opsReplica{nc, rep})
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.replicas = slices.DeleteFunc(s.replicas, func(r opsReplica) bool { return r.rep == rep })
	}
}

// addDomain registers a domain-limit replica until the returned function
// is called.
func (s *opsState) addDomain(rep *domainserver.Replica) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.domains = append(s.domains, rep)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.domains = slices.DeleteFunc(s.domains, func(r *domainserver.Replica) bool { return r == rep })
	}
}

// domainStats returns the STATS of the domain-limit partitions this
// process leads now.
func (s *opsState) domainStats() []domainserver.Stats {
	s.mu.Lock()
	reps := slices.Clone(s.domains)
	s.mu.Unlock()
	var out []domainserver.Stats
	for _, r := range reps {
		if srv := r.Server(); srv != nil {
			out = append(out, srv.Stats())
		}
	}
	return out
}

// Replicas returns the replicas the process runs now.
func (s *opsState) Replicas() []*coordinator.Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*coordinator.Replica, len(s.replicas))
	for i, r := range s.replicas {
		out[i] = r.rep
	}
	return out
}

func (s *opsState) targets() []metrics.Target {
	reps := s.Replicas()
	out := make([]metrics.Target, len(reps))
	for i, r := range reps {
		out[i] = r
	}
	return out
}

// ready returns nil when every replica of the process is ready, else why
// not. A replica is ready when its NATS connection is up, its templates
// are loaded, and it either leads and serves, or follows a leader it
// knows of (an election that works; the leader may be in another
// process). A process with no replica yet is not ready.
func (s *opsState) ready() error {
	s.mu.Lock()
	reps := slices.Clone(s.replicas)
	s.mu.Unlock()
	if len(reps) == 0 {
		return errors.New("starting: no coordinator replica yet")
	}
	var problems []string
	for _, r := range reps {
		o := r.rep.Observe()
		switch who := "replica " + o.ServerID + " of node " + o.Node + ": "; {
		case !r.nc.IsConnected():
			problems = append(problems, who+"not connected to NATS ("+r.nc.Status().String()+")")
		case !o.ConfigLoaded:
			problems = append(problems, who+"templates not loaded yet")
		case o.Role == election.RoleLeader && !o.Serving:
			why := "leads but its coordinator does not serve"
			if o.Failure != "" {
				why += ": " + o.Failure
			}
			problems = append(problems, who+why)
		case o.Role != election.RoleLeader && o.Leader == "":
			problems = append(problems, who+"follower with no known leader")
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// opsRegistry is the Prometheus registry of the binary: the coordinator
// collector of st's replicas, the Go runtime and process collectors, and
// build information.
func opsRegistry(st *opsState) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewCoordinatorCollector(st.targets, metrics.Options{MaxResources: st.maxResources}),
		metrics.NewDomainCollector(st.domainStats),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	)
	return reg
}

// opsMux returns the ops HTTP mux: /metrics (Prometheus text format from
// g), /healthz (200 while the process runs) and /readyz (200 when ready
// returns nil, else 503 with the reason). Other handlers mount on it: the
// dashboard at "/".
func opsMux(g prometheus.Gatherer, ready func() error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// startOps serves the ops mux for st on addr until ctx ends. With
// fallback set (the address is `allot up`'s default) a busy address is
// replaced by a free port on the same host. It returns the base URL.
func startOps(ctx context.Context, addr string, fallback bool, st *opsState, log *slog.Logger) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil && fallback {
		host, _, _ := net.SplitHostPort(addr)
		log.Warn("metrics address in use; picking a free port", "addr", addr, "err", err)
		l, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return "", fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := opsMux(opsRegistry(st), st.ready)
	if err := mountDashboard(ctx, mux, st, l.Addr(), addr, log); err != nil {
		l.Close()
		return "", err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ops HTTP server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return "http://" + l.Addr().String(), nil
}

// versionString is allot's version, the one its services report, with
// the commit it was built from when the build information has it, and
// the Go version.
func versionString() string {
	built := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				built = "commit " + s.Value[:12] + ", " + built
			}
		}
	}
	return version.Version + " (" + built + ")"
}

// logHandler makes the binary's slog handler: format "text" or "json".
func logHandler(env *cliEnv, format string, lvl slog.Level) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.NewTextHandler(env.stderr, opts), nil
	case "json":
		return slog.NewJSONHandler(env.stderr, opts), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
