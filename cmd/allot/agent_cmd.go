package main

// allot agent: a sidecar beside Envoy (and any local service). It answers
// Envoy's rate limit service from its leases where a template maps a
// descriptor to a lease resource, and through the quota partitions
// otherwise; GET /v1/allow answers any lease resource over local HTTP.
// See docs/envoy.md.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spf13/pflag"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/allowhttp"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/rlqsserver"
	"github.com/allot/allot/internal/rls"
	"github.com/allot/allot/internal/subjects"
)

func defineAgent(fs *pflag.FlagSet) runFunc {
	var conn connFlags
	conn.register(fs)
	var rf rlsFlags
	rf.register(fs, false)
	httpAddr := fs.String("http-addr", "", "HOST:PORT to answer GET "+allowhttp.Path+"?resource=ID[&n=N][&wait=D] on over HTTP, from this agent's leases (empty: none)")
	node := fs.String("node", "root", "tree node whose coordinator and partitions to use (allot.<node>.*)")
	clientID := fs.String("client-id", "", "this agent's client id at the coordinator (default host:pid:random)")
	mode := fs.String("mode", "safe", "what a lease-mapped descriptor gets once its lease has expired unrefreshed: 'safe' (the floor the coordinator last told, then nothing), 'optimistic' (what it wants) or 'pessimistic' (nothing)")
	configBucket := fs.String("config-bucket", configkv.DefaultBucket, "KV bucket holding the templates and Envoy domains")
	maxLeases := fs.Int("max-leases", rls.DefaultMaxLeases, "most lease resources the sidecar holds at once; descriptors beyond are counted in the partitions (0: the default)")
	shadow := fs.Bool("shadow", false, "ShouldRateLimit: answer OK overall even when a descriptor is over its limit, which still says OVER_LIMIT (the reference's SHADOW_MODE)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if rf.addr == "" && *httpAddr == "" {
			return errors.New("give --rls-addr (Envoy's rate limit service) or --http-addr (the local allow endpoint), or both")
		}
		if err := subjects.ValidateNode(*node); err != nil {
			return fmt.Errorf("--node %q: %w", *node, err)
		}
		if *maxLeases < 0 {
			return usageError{fmt.Errorf("--max-leases %d: want 0 (the default, %d) or more", *maxLeases, rls.DefaultMaxLeases)}
		}
		decide, err := rf.decide(*shadow)
		if err != nil {
			return err
		}
		agentMode, err := parseMode(*mode)
		if err != nil {
			return err
		}
		cf := coordFlags{logLevel: *logLevel, logFormat: *logFormat}
		log, err := cf.logger(env)
		if err != nil {
			return err
		}
		nc, err := connect(&conn, "allot agent", log)
		if err != nil {
			return err
		}
		defer nc.Close()
		w, err := watchConfig(ctx, nc, *configBucket, log)
		if err != nil {
			return err
		}
		defer w.Stop()
		router, err := envoyserver.NewRouter(nc, envoyserver.RouterOptions{Node: *node})
		if err != nil {
			return err
		}
		aopts := []agent.Option{agent.WithNode(*node), agent.WithMode(agentMode), agent.WithLogger(log)}
		if *clientID != "" {
			aopts = append(aopts, agent.WithClientID(*clientID))
		}
		store, err := rls.NewLeaseStore(rls.LeaseStoreOptions{Conn: nc, Agent: aopts, Templates: w.Current, Central: router, MaxLeases: *maxLeases, Logger: log})
		if err != nil {
			return err
		}
		defer func() {
			if err := store.Close(); err != nil {
				log.Warn("releasing the leases", "err", err)
			}
		}()
		var runs []func(context.Context) error
		if rf.addr != "" {
			svc, err := rls.New(rls.Options{Config: rls.WatchedConfig(w), Store: store, Decide: decide, Logger: log})
			if err != nil {
				return err
			}
			srv, err := rls.Listen(rf.addr, log)
			if err != nil {
				return err
			}
			svc.Register(srv.GRPC())
			quotas, err := rlqsserver.New(nc, rlqsserver.Options{Node: *node, Templates: w.Current, Logger: log})
			if err != nil {
				return err
			}
			quotas.Register(srv.GRPC())
			fmt.Fprintf(env.stdout, "allot agent: envoy rate limit service (gRPC: ShouldRateLimit, RLQS) at %s\n", srv.Addr())
			runs = append(runs, srv.Serve)
		}
		if *httpAddr != "" {
			serveHTTP, addr, err := allowEndpoint(*httpAddr, store.Agent())
			if err != nil {
				return err
			}
			fmt.Fprintf(env.stdout, "allot agent: allow endpoint at http://%s%s?resource=ID\n", addr, allowhttp.Path)
			runs = append(runs, serveHTTP)
		}
		log.Info("allot agent serving", "node", *node, "client_id", store.Agent().ClientID(), "mode", agentMode.String())
		return runAll(ctx, runs)
	}
}

// parseMode reads --mode.
func parseMode(s string) (agent.Mode, error) {
	for _, m := range []agent.Mode{agent.Safe, agent.Optimistic, agent.Pessimistic} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("--mode %q: want safe, optimistic or pessimistic", s)
}

// watchConfig watches the configuration bucket, which must exist (a
// coordinator or `allot up` creates it), resyncing on reconnects.
func watchConfig(ctx context.Context, nc *nats.Conn, bucket string, log *slog.Logger) (*configkv.Watcher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := configkv.OpenBucket(sctx, js, bucket, false)
	if err != nil {
		return nil, fmt.Errorf("%w (a coordinator or `allot up` creates it)", err)
	}
	return startWatcher(sctx, nc, kv, nil, log, nil)
}

// allowEndpoint listens on addr for the allow endpoint of a's leases and
// returns its run.
func allowEndpoint(addr string, a *agent.Agent) (func(context.Context) error, string, error) {
	h, err := allowhttp.New(a, allowhttp.Options{})
	if err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(allowhttp.Path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	run := func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(l) }()
		select {
		case err := <-errc:
			return fmt.Errorf("allow endpoint: %w", err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("allow endpoint: %w", err)
		}
		return nil
	}
	return run, l.Addr().String(), nil
}
