package main

// allot up: an embedded NATS server with its coordinator replicas, for a
// try-out or a level of a tree on one machine.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spf13/pflag"

	"github.com/allot/allot/deploy/templates"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/heapfloor"
	"github.com/allot/allot/quotaserver"
)

func defineUp(fs *pflag.FlagSet) runFunc {
	cf := coordFlags{metricsAddr: defaultUpMetricsAddr}
	cf.register(fs)
	host := fs.String("host", "127.0.0.1", "address the embedded NATS server listens on")
	port := fs.Int("port", 4222, "NATS client port (0 picks a free one)")
	dataDir := fs.String("data-dir", defaultDataDir(), "JetStream store directory (keeps configuration and lease horizons across restarts)")
	natsLog := fs.Bool("nats-log", false, "show the embedded NATS server's own log")
	leafPort := fs.Int("leafnode-port", 0, "also accept leaf-node connections from child levels of the tree on this port (-1 picks a free one; 0: none)")
	noAdvertise := fs.Bool("no-advertise", false, "with --leafnode-port: do not tell child levels this server's own leaf-node address, so they reconnect only to the URLs they were given (a proxy, a load balancer, a NAT address)")
	parentURL := fs.String("parent-url", "", "with --parent-node: the parent level's leaf-node URL(s), nats-leaf://HOST:PORT, comma-separated; the embedded server joins it as a leaf node")
	replicas := fs.Int("replicas", 1, "coordinator replicas to run, each on its own NATS connection; one leads, the others follow (see 'allot status')")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		cf.settle(fs)
		if *replicas < 1 {
			return fmt.Errorf("--replicas %d: want at least 1", *replicas)
		}
		if err := noArgs(args); err != nil {
			return err
		}
		tree, err := upTree(&cf, *port, *leafPort, *parentURL)
		if err != nil {
			return err
		}
		if *noAdvertise && *leafPort == 0 {
			return fmt.Errorf("--no-advertise needs --leafnode-port: it only changes what child levels are told")
		}
		log, err := cf.logger(env)
		if err != nil {
			return err
		}
		defer heapfloor.Start(ctx, cf.heapFloorBytes, log)()
		if err := os.MkdirAll(*dataDir, 0o755); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		lock, err := lockDataDir(*dataDir)
		if err != nil {
			return err
		}
		defer lock.Release()
		// Servers joined by leaf nodes need distinct names.
		srv, err := embed.Start(embed.Options{Host: *host, Port: *port, StoreDir: *dataDir, Log: *natsLog, ServerName: "allot-" + cf.node,
			LeafNodePort: tree.leafPort, LeafNoAdvertise: *noAdvertise, LeafRemotes: tree.remotes, Domain: tree.domain, Mappings: partitionMappings(cf.node, cf.quotaParts)})
		if err != nil {
			return fmt.Errorf("%w (--port 0 and --leafnode-port -1 pick free ports)", err)
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		log.Info("embedded NATS server ready", "url", srv.ClientURL(), "store", *dataDir)
		nc, err := nats.Connect(srv.ClientURL(), nats.Name("allot up"))
		if err != nil {
			return fmt.Errorf("connect to embedded server: %w", err)
		}
		defer nc.Close()
		var opsURL string
		if !fs.Changed("metrics-addr") && env.upMetricsAddr != "" {
			cf.metricsAddr = env.upMetricsAddr
		}
		if cf.metricsAddr != "" {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			cf.ops = cf.newOps(nc)
			if opsURL, err = startOps(ctx, cf.metricsAddr, !fs.Changed("metrics-addr"), cf.ops, log); err != nil {
				return err
			}
		}
		// A child's templates come from the root through its mirror; seeding
		// would write to the root's bucket through it.
		if cf.parent == "" {
			if err := seedTemplates(ctx, nc, &cf, log); err != nil {
				return err
			}
		}
		cf.rls.announce = func(addr string) {
			fmt.Fprintf(env.stdout, "  envoy rate limit service (gRPC: ShouldRateLimit, RLQS) at %s\n", addr)
		}
		// Announce once every lease partition this process serves has a
		// replica serving (a request for a partition still electing would
		// get 503), or after 10 s (another process's leader may serve).
		_, leaseParts, err := cf.leasePartitions()
		if err != nil {
			return err
		}
		var mu sync.Mutex
		serving := map[int]bool{}
		ready := make(chan struct{})
		if len(leaseParts) == 0 {
			close(ready) // nothing to wait for
		}
		cf.onServing = func(p int, _ uint64, on bool) {
			mu.Lock()
			defer mu.Unlock()
			if on && !serving[p] {
				serving[p] = true
				if len(serving) == len(leaseParts) {
					close(ready)
				}
			}
		}
		go func() {
			select {
			case <-ready:
			case <-time.After(10 * time.Second):
				log.Warn("no replica of this process leads yet; another process may")
			case <-ctx.Done():
				return
			}
			if cf.parent != "" && !waitLinked(ctx, srv, 10*time.Second) {
				log.Warn("not joined to the parent level yet; retrying (check --parent-url and the parent's --leafnode-port)", "parent-url", strings.Join(tree.remotes, ","))
			}
			fmt.Fprintf(env.stdout, "allot is up: NATS at %s, node %q, %d replica(s)\n", srv.ClientURL(), cf.node, *replicas)
			if tree.domain != "" {
				fmt.Fprintf(env.stdout, "  JetStream domain: %s\n", tree.domain)
			}
			if u := embed.LeafNodeURL(srv); u != "" {
				fmt.Fprintf(env.stdout, "  accepting child levels at %s (allot up --node CHILD --parent-node %s --parent-url %s)\n", u, cf.node, u)
			}
			if cf.parent != "" {
				fmt.Fprintf(env.stdout, "  parent: node %q at %s; %s mirrors %s of domain %s\n", cf.parent, strings.Join(tree.remotes, ","), cf.configBucket, cf.configBucket, cf.parent)
			}
			fmt.Fprintf(env.stdout, "  quota: %s (bucket in the payload) and %s, %d partition(s)\n",
				quotaserver.TakeSubject(cf.node), quotaserver.BucketSubject(cf.node, "take", "NAMESPACE", "NAME"), cf.quotaParts)
			fmt.Fprintf(env.stdout, "  domain limits: %s (request, reserve, release, refresh, transfer, seize)\n",
				domainwire.Subject(cf.node, "OP", "NAMESPACE", "RESOURCE"))
			if opsURL != "" {
				switch {
				case cf.ops.dashboardOff:
					fmt.Fprintf(env.stdout, "  dashboard off: --metrics-addr listens beyond loopback; give it --dashboard-token\n")
				case cf.dashboard.token != "":
					fmt.Fprintf(env.stdout, "  dashboard at %s/ (open %s/?token=TOKEN once, with the --dashboard-token)\n", opsURL, opsURL)
				default:
					fmt.Fprintf(env.stdout, "  dashboard at %s/\n", opsURL)
				}
				fmt.Fprintf(env.stdout, "  metrics at %s/metrics, health at %s/healthz and %s/readyz\n", opsURL, opsURL, opsURL)
			}
			// A resource that gets a lease: under --unmatched reject no
			// catch-all example is seeded and a made-up id is a 404, but
			// the seeded example mysql-main serves mysql/main.
			try := "db"
			if cf.unmatched == config.UnmatchedReject {
				try = "mysql/main"
			}
			fmt.Fprintf(env.stdout, "try: go run ./cmd/allot get --nats %s --node %s %s --wants 10\n     go run ./cmd/allot status --nats %s\n",
				srv.ClientURL(), cf.node, try, srv.ClientURL())
		}()
		if *replicas == 1 {
			return serve(ctx, nc, &cf, log)
		}
		return serveReplicas(ctx, srv.ClientURL(), &cf, *replicas, log)
	}
}

// waitLinked waits up to limit for srv's leaf link to its parent, and
// reports whether it is up.
func waitLinked(ctx context.Context, srv *server.Server, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for !embed.LeafLinked(srv) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// treeFlags are the leaf-node settings of `allot up`'s embedded server.
type treeFlags struct {
	leafPort int
	remotes  []string
	domain   string
}

// upTree validates `allot up`'s tree flags. A server in a tree (accepting
// children or joined to a parent) gets the node's name as its JetStream
// domain, so each level keeps its own buckets and children can mirror its
// configuration bucket through $JS.<node>.API.
func upTree(cf *coordFlags, port, leafPort int, parentURL string) (treeFlags, error) {
	var t treeFlags
	if err := cf.validate(); err != nil {
		return t, err
	}
	switch {
	case cf.parent != "" && parentURL == "":
		return t, fmt.Errorf("--parent-node %s needs --parent-url nats-leaf://HOST:PORT, the parent's leaf-node port (its --leafnode-port)", cf.parent)
	case cf.parent == "" && parentURL != "":
		return t, errors.New("--parent-url needs --parent-node, the name of the parent's node")
	case leafPort < embed.RandomPort || leafPort > 65535:
		return t, fmt.Errorf("--leafnode-port %d: want 1-65535, -1 for a free port, or 0 for none", leafPort)
	case leafPort > 0 && leafPort == port:
		return t, fmt.Errorf("--leafnode-port %d is also --port: leaf nodes need a port of their own", leafPort)
	}
	t.leafPort = leafPort
	if parentURL != "" {
		for u := range strings.SplitSeq(parentURL, ",") {
			t.remotes = append(t.remotes, strings.TrimSpace(u))
		}
		if _, err := embed.LeafURLs(t.remotes); err != nil {
			return t, fmt.Errorf("--parent-url: %w", err)
		}
	}
	if leafPort != 0 || cf.parent != "" {
		t.domain = cf.node
	}
	return t, nil
}

// serveReplicas runs n coordinator replicas, each on its own connection,
// until ctx ends.
func serveReplicas(ctx context.Context, url string, cf *coordFlags, n int, log *slog.Logger) error {
	base := cf.serverID
	if base == "" {
		host, _ := os.Hostname()
		base = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	runs := make([]func(context.Context) error, n)
	for i := range n {
		rcf := *cf
		rcf.serverID = fmt.Sprintf("%s-%d", base, i)
		if i > 0 {
			rcf.rls.addr = "" // one gRPC front end; it asks every replica's partitions
		}
		nc, err := connect(&connFlags{url: url}, "allot up replica "+rcf.serverID, log)
		if err != nil {
			return err
		}
		defer nc.Close()
		runs[i] = func(ctx context.Context) error { return serve(ctx, nc, &rcf, log.With("replica", i)) }
	}
	return runAll(ctx, runs)
}

// seedTemplates stores the example templates of deploy/templates in the
// configuration bucket (creating it as a coordinator would), leaving keys
// that exist or existed alone. Under --unmatched reject the catch-all
// example (glob "*") is left out, since no resource would be unmatched
// while it exists; one stored earlier is reported when the templates are
// loaded (warnCatchAll).
func seedTemplates(ctx context.Context, nc *nats.Conn, cf *coordFlags, log *slog.Logger) error {
	bucket, unmatched := cf.configBucket, cf.unmatched
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := configkv.OpenBucket(ctx, js, bucket, true, configkv.Replicas(cf.replicasKV))
	if err != nil {
		return err
	}
	examples := templates.FS()
	reject := unmatched == config.UnmatchedReject
	if reject {
		var skipped []string
		if examples, skipped, err = withoutCatchAll(examples); err != nil {
			return fmt.Errorf("seed example templates: %w", err)
		}
		log.Info("--unmatched reject: not seeding the catch-all example template", "templates", skipped)
	}
	names, err := configkv.SeedTemplates(ctx, kv, examples)
	if err != nil {
		return fmt.Errorf("seed example templates: %w", err)
	}
	if len(names) > 0 {
		log.Info("seeded example templates", "bucket", bucket, "templates", names)
	}
	return nil
}

// withoutCatchAll hides the templates of dir whose glob matches every
// resource, and names them.
func withoutCatchAll(dir fs.FS) (fs.FS, []string, error) {
	files, err := fs.ReadDir(dir, ".")
	if err != nil {
		return nil, nil, err
	}
	h := hiddenFS{FS: dir}
	var names []string
	for _, f := range files {
		data, err := fs.ReadFile(dir, f.Name())
		if err != nil {
			return nil, nil, err
		}
		name := strings.TrimSuffix(f.Name(), path.Ext(f.Name()))
		if t, _, err := config.ParseAndCompile(name, 0, data); err == nil && t.Glob == "*" {
			h.hide = append(h.hide, f.Name())
			names = append(names, name)
		}
	}
	return h, names, nil
}

// hiddenFS is a flat directory without the files named in hide.
type hiddenFS struct {
	fs.FS
	hide []string
}

func (h hiddenFS) Open(name string) (fs.File, error) {
	if slices.Contains(h.hide, name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return h.FS.Open(name)
}

func (h hiddenFS) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(h.FS, name)
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return slices.Contains(h.hide, e.Name()) }), err
}

func defaultDataDir() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "allot", "up")
	}
	return filepath.Join(os.TempDir(), "allot-up")
}
