package deploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// setVars sets the environment variables the configs reference for
// server i of a level whose servers route to each other on cports; other
// ports -1 pick free ones. Lists are written unquoted, as in the examples
// of the configs and deploy/README.md.
func setVars(t *testing.T, name string, i int, cports []int, parentLeaf []string, extra map[string]string) {
	t.Helper()
	var routes []string
	for _, p := range cports {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	vars := map[string]string{
		"SERVER_NAME": name, "STORE_DIR": t.TempDir(),
		"CLIENT_PORT": "-1", "HTTP_LISTEN": "127.0.0.1:-1", "CLUSTER_PORT": strconv.Itoa(cports[i]), "LEAF_PORT": "-1",
		"ROUTES":           "[" + strings.Join(routes, ", ") + "]",
		"PARENT_LEAF_URLS": "[" + strings.Join(parentLeaf, ", ") + "]",
	}
	for k, v := range extra {
		vars[k] = v
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
}

// freePort returns a port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestNATSConfigsParse loads every NATS config with the server's own
// parser, and checks what each level's file links: cluster.conf none (a
// root on its own), cluster-child.conf a parent, region.conf a parent and
// children, global.conf children. Monitoring, which has no
// authentication, listens where HTTP_LISTEN says (127.0.0.1 in the docs),
// not on every interface.
func TestNATSConfigsParse(t *testing.T) {
	setVars(t, "n-1", 0, []int{6222}, []string{"nats-leaf://parent:7422"}, map[string]string{"NODE": "eu-1"})
	files, err := filepath.Glob("nats/*.conf")
	if err != nil || len(files) < 5 {
		t.Fatalf("configs: %v %v", files, err)
	}
	links := map[string]struct{ parent, children bool }{
		"cluster.conf": {false, false}, "cluster-child.conf": {true, false},
		"region.conf": {true, true}, "global.conf": {false, true}, "single.conf": {false, false},
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			opts, err := server.ProcessConfigFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !opts.JetStream {
				t.Fatal("JetStream is off")
			}
			want, ok := links[filepath.Base(f)]
			if !ok {
				t.Fatalf("a config this test does not know: say what it links")
			}
			if parent := len(opts.LeafNode.Remotes) > 0; parent != want.parent {
				t.Errorf("links a parent: %v, want %v", parent, want.parent)
			}
			if children := opts.LeafNode.Port != 0; children != want.children {
				t.Errorf("accepts children: %v, want %v", children, want.children)
			}
			if opts.HTTPHost != "127.0.0.1" {
				t.Errorf("monitoring listens on %q, want 127.0.0.1", opts.HTTPHost)
			}
		})
	}
}

// startConfig starts a nats-server from config file f (its variables set
// by the caller) and stops it when the test ends.
func startConfig(t *testing.T, f string) *server.Server {
	t.Helper()
	s, err := tryConfig(t, f, natstest.ReadyWait)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tryConfig starts a nats-server from config file f and waits up to wait
// for it to accept connections; the server stops when the test ends. A
// server that is not ready is shut down and reported as an error.
func tryConfig(t *testing.T, f string, wait time.Duration) (*server.Server, error) {
	t.Helper()
	opts, err := server.ProcessConfigFile(f)
	if err != nil {
		return nil, err
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", f, err)
	}
	go s.Start()
	if !s.ReadyForConnections(wait) {
		s.Shutdown()
		return nil, fmt.Errorf("%s: not ready within %v", f, wait)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s, nil
}

// levelSize is the number of servers per level: a level's JetStream is
// clustered, and its meta group elects a leader only with a quorum of the
// peers its routes name (one server routing to itself never does).
const levelSize = 3

// startLevel starts levelSize servers from config file f, routed to each
// other and, if parent is set, leaf nodes of it. It returns the first.
func startLevel(t *testing.T, f, name string, parent []*server.Server, extra map[string]string) []*server.Server {
	t.Helper()
	var leafs []string
	for _, p := range parent {
		leafs = append(leafs, embed.LeafNodeURL(p))
	}
	// The route ports are chosen free, then bound by the servers: on a busy
	// machine another process can take one in between, and that server
	// never becomes ready (seen once in a loaded stress run). Such a level
	// starts again on new ports.
	var out []*server.Server
	var err error
	for range 3 {
		if out, err = tryLevel(t, f, name, leafs, extra); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if parent != nil {
		for _, s := range out {
			waitLinked(t, s)
		}
	}
	return out
}

// tryLevel starts levelSize servers from config file f on new route
// ports; if one is not ready within 20s, it shuts down those it started.
func tryLevel(t *testing.T, f, name string, leafs []string, extra map[string]string) ([]*server.Server, error) {
	t.Helper()
	cports := make([]int, levelSize)
	for i := range cports {
		cports[i] = freePort(t)
	}
	var out []*server.Server
	for i := range levelSize {
		setVars(t, fmt.Sprintf("%s-%d", name, i+1), i, cports, leafs, extra)
		s, err := tryConfig(t, f, 20*time.Second)
		if err != nil {
			for _, o := range out {
				o.Shutdown()
			}
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// accountInfo waits until js's JetStream answers (its meta group has
// elected a leader), each try bounded so that one unanswered request does
// not use up ctx.
func accountInfo(ctx context.Context, t *testing.T, js jetstream.JetStream) *jetstream.AccountInfo {
	t.Helper()
	var ai *jetstream.AccountInfo
	poll.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		var err error
		if ai, err = js.AccountInfo(tctx); err != nil {
			return fmt.Errorf("JetStream not ready: %w", err)
		}
		return nil
	})
	return ai
}

func waitLinked(t *testing.T, s *server.Server) {
	t.Helper()
	poll.Until(t, 10*time.Second, s.Name()+"'s leaf link to its parent", func() bool { return embed.LeafLinked(s) })
}

// TestNATSTree starts a server from each level's config as it is, with
// the variables filled in (random ports, temporary stores), joined by leaf
// nodes: a request from the cluster level reaches a responder at the
// global level two links away, and each level has its own JetStream
// domain, so a bucket of one level is not seen at another.
func TestNATSTree(t *testing.T) {
	global := startLevel(t, "nats/global.conf", "global", nil, map[string]string{"NODE": "global"})
	region := startLevel(t, "nats/region.conf", "eu", global, map[string]string{"NODE": "eu"})
	cluster := startLevel(t, "nats/cluster-child.conf", "eu-1", region, map[string]string{"NODE": "eu-1"})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conns := map[string]*nats.Conn{}
	for domain, l := range map[string][]*server.Server{"global": global, "eu": region, "eu-1": cluster} {
		s := l[0]
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns[domain] = nc
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ai := accountInfo(ctx, t, js)
		if ai.Domain != domain {
			t.Fatalf("server %s: JetStream domain %q, want %q", s.Name(), ai.Domain, domain)
		}
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "level_" + domain}); err != nil {
			t.Fatalf("%s: create bucket: %v", domain, err)
		}
	}
	// Each level's buckets are its own; another level reaches them only
	// through the domain's API prefix.
	clusterJS, _ := jetstream.New(conns["eu-1"])
	if _, err := clusterJS.KeyValue(ctx, "level_global"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("global's bucket looked up in domain eu-1: %v, want bucket not found", err)
	}
	viaGlobal, err := jetstream.NewWithDomain(conns["eu-1"], "global")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := viaGlobal.KeyValue(ctx, "level_global"); err != nil {
		t.Fatalf("global's bucket from the cluster level through domain global: %v", err)
	}
	// allot's configuration mirrors work over these links: a template put
	// at the global level reaches the cluster level's mirror of the
	// region's mirror.
	globalJS, _ := jetstream.New(conns["global"])
	rootKV, err := configkv.OpenBucket(ctx, globalJS, configkv.DefaultBucket, true)
	if err != nil {
		t.Fatal(err)
	}
	regionJS, _ := jetstream.New(conns["eu"])
	if _, err := configkv.OpenMirror(ctx, regionJS, configkv.DefaultBucket, "global"); err != nil {
		t.Fatal(err)
	}
	clusterKV, err := configkv.OpenMirror(ctx, clusterJS, configkv.DefaultBucket, "eu")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rootKV.Put(ctx, config.Key("x"), []byte(`{"identifier_glob":"x","capacity":7}`)); err != nil {
		t.Fatal(err)
	}
	poll.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		e, err := clusterKV.Get(ctx, config.Key("x"))
		switch {
		case err != nil:
			return fmt.Errorf("template put at global, read at the cluster level's mirror: %w", err)
		case string(e.Value()) != `{"identifier_glob":"x","capacity":7}`:
			return fmt.Errorf("template put at global, read at the cluster level's mirror as %s", e.Value())
		}
		return nil
	})
	if _, err := conns["global"].Subscribe("allot.global.server.get", func(m *nats.Msg) { _ = m.Respond([]byte("global")) }); err != nil {
		t.Fatal(err)
	}
	poll.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		m, err := conns["eu-1"].Request("allot.global.server.get", nil, 500*time.Millisecond)
		switch {
		case err != nil:
			return fmt.Errorf("request from the cluster level to the global level: %w", err)
		case string(m.Data) != "global":
			return fmt.Errorf("request from the cluster level to the global level answered %q", m.Data)
		}
		return nil
	})
}
