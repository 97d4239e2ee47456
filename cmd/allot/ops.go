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
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/version"
	"github.com/allot/allot/metrics"
	"github.com/allot/allot/quotaserver"
)

// defaultUpMetricsAddr is where `allot up` serves /metrics, /healthz and
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
	// The partitions of the per-request services this process campaigns
	// for, for their collectors.
	quotas  leaderStats[quotaserver.Stats]
	domains leaderStats[domainserver.Stats]
	envoys  leaderStats[envoyserver.Stats]
}

// leaderStats are the STATS sources of one service's partitions in this
// process: each says its server's STATS while it leads.
type leaderStats[St any] struct {
	mu      sync.Mutex
	sources []*func() (St, bool)
}

// add registers the partition whose serving leader server returns (nil
// when not leading) until the returned function is called.
func addLeader[St any, S interface {
	comparable
	Stats() St
}](ls *leaderStats[St], server func() S) (remove func()) {
	src := func() (St, bool) {
		var none S
		if s := server(); s != none {
			return s.Stats(), true
		}
		var zero St
		return zero, false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.sources = append(ls.sources, &src)
	return func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		ls.sources = slices.DeleteFunc(ls.sources, func(f *func() (St, bool)) bool { return f == &src })
	}
}

// all returns the STATS of the partitions this process leads now.
func (ls *leaderStats[St]) all() []St {
	ls.mu.Lock()
	srcs := slices.Clone(ls.sources)
	ls.mu.Unlock()
	var out []St
	for _, f := range srcs {
		if st, ok := (*f)(); ok {
			out = append(out, st)
		}
	}
	return out
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
		who := "replica " + o.ServerID + " of node " + o.Node + ": "
		if o.Partitions > 1 {
			who = fmt.Sprintf("replica %s of node %s, lease partition %d of %d: ", o.ServerID, o.Node, o.Partition, o.Partitions)
		}
		switch {
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
		metrics.NewQuotaCollector(st.quotas.all),
		metrics.NewDomainCollector(st.domains.all),
		metrics.NewEnvoyCollector(st.envoys.all),
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
