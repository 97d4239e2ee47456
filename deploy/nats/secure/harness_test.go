package secure_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/secureinit"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/replica"
)

// wait bounds every wait of the suite: a refusal, a lease, a server.
const wait = 10 * time.Second

// template is the one resource template of the suite: two tenants
// wanting 40 each both get their 40.
const (
	resource = "db"
	template = `{"identifier_glob": "db", "capacity": 100, "algorithm": {"kind": "FAIR_SHARE", "lease_length": "30s", "refresh_interval": "1s"}}`
)

// serverLog keeps a server's log lines so that a test can see the
// server's own account of a refusal (a leaf link's violation is logged
// there, not sent to any client).
type serverLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) add(format string, v ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
	l.mu.Unlock()
}
func (l *serverLog) Noticef(format string, v ...any) { l.add("[INF] "+format, v...) }
func (l *serverLog) Warnf(format string, v ...any)   { l.add("[WRN] "+format, v...) }
func (l *serverLog) Fatalf(format string, v ...any)  { l.add("[FTL] "+format, v...) }
func (l *serverLog) Errorf(format string, v ...any)  { l.add("[ERR] "+format, v...) }
func (l *serverLog) Debugf(format string, v ...any)  { l.add("[DBG] "+format, v...) }
func (l *serverLog) Tracef(format string, v ...any)  {}

// waitFor waits for a line containing every one of parts.
func (l *serverLog) waitFor(t *testing.T, parts ...string) string {
	t.Helper()
	var found string
	poll.Until(t, wait, fmt.Sprintf("the server to log a line with %q", parts), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, line := range l.lines {
			if containsAll(line, parts) {
				found = line
				return true
			}
		}
		return false
	})
	return found
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// startConfig starts a server from the shipped file with the variables
// env, keeping its log.
func startConfig(t *testing.T, file string, env map[string]string) (*server.Server, *serverLog) {
	t.Helper()
	log := &serverLog{}
	return natstest.ConfigServer(t, file, env, log), log
}

// deployment is a root server started from root.conf with the
// credentials of secureinit, a coordinator replica of node root on the
// coordinator user's connection, and the suite's template put by admin.
type deployment struct {
	set *secureinit.Setup
	srv *server.Server
	log *serverLog
	env map[string]string // the root server's, for restart
	// later are the cleanups of a restarted root server, run where the
	// first one's are: after everything connected to it has stopped.
	later   []func()
	leafURL string
	// coord is the replica of node root (startCoordinator); coordErrs
	// are its connection's asynchronous errors; stopCoord stops the
	// replica (it resigns) and waits for it.
	coord     *coord
	coordErrs *asyncErrors
	stopCoord func()
	// opts are the options of the root's replicas beside node, server
	// id and templates (startDeploymentWith).
	opts coordinator.Options
}

// rootEnv is the setup's environment with free ports and a temporary
// store: what the suite changes of what `allot secure init` writes.
func rootEnv(t *testing.T, set *secureinit.Setup, verify bool) map[string]string {
	env := map[string]string{}
	for k, v := range set.Env {
		env[k] = v
	}
	env["CLIENT_PORT"], env["LEAF_PORT"], env["HTTP_LISTEN"] = "-1", "-1", "127.0.0.1:-1"
	env["STORE_DIR"] = t.TempDir()
	env["TLS_VERIFY"] = fmt.Sprint(verify)
	return env
}

// newSetup writes fresh credentials for one test.
func newSetup(t *testing.T) *secureinit.Setup {
	t.Helper()
	set, err := secureinit.Init(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// startRoot starts the root server alone.
func startRoot(t *testing.T, verify bool) *deployment {
	t.Helper()
	d := &deployment{set: newSetup(t)}
	d.env = rootEnv(t, d.set, verify)
	d.srv, d.log = startConfig(t, "root.conf", d.env)
	t.Cleanup(func() {
		for i := len(d.later) - 1; i >= 0; i-- {
			d.later[i]()
		}
	})
	v, err := d.srv.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	d.leafURL = fmt.Sprintf("tls://127.0.0.1:%d", v.LeafNode.Port)
	return d
}

// stopRoot shuts the root server down, as a crash or an upgrade would;
// startRootAgain starts it again from root.conf on the same client port
// and store, so that clients reconnect to it.
func (d *deployment) stopRoot(t *testing.T) {
	t.Helper()
	addr, ok := d.srv.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatal("server has no client listener")
	}
	d.env["CLIENT_PORT"] = fmt.Sprint(addr.Port)
	d.srv.Shutdown()
	d.srv.WaitForShutdown()
}

func (d *deployment) startRootAgain(t *testing.T) {
	t.Helper()
	d.log = &serverLog{}
	d.srv = natstest.ConfigServer(laterTB{t, &d.later}, "root.conf", d.env, d.log)
}

// laterTB is a test whose cleanups are kept in a list for later.
type laterTB struct {
	testing.TB
	later *[]func()
}

func (l laterTB) Cleanup(f func()) { *l.later = append(*l.later, f) }

// startDeployment starts the root server, puts the template as admin and
// runs a coordinator replica until it serves.
func startDeployment(t *testing.T) *deployment {
	t.Helper()
	return startDeploymentWith(t, coordinator.Options{})
}

// startDeploymentWith is startDeployment with opts for the root's
// replicas.
func startDeploymentWith(t *testing.T, opts coordinator.Options) *deployment {
	t.Helper()
	d := startRoot(t, false)
	d.opts = opts
	admin, _ := d.dial(t, d.srv, "admin")
	if err := putTemplate(t, admin, resource, true); err != nil {
		t.Fatal(err)
	}
	d.startCoordinator(t)
	return d
}

// putTemplate puts the suite's template under name in allot_config
// (created if create) on nc, and returns the error.
func putTemplate(t *testing.T, nc *nats.Conn, name string, create bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := configkv.OpenBucket(ctx, js, "", create)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, config.Key(name), []byte(template))
	return err
}

// startCoordinator runs a replica of node root the way `allot
// coordinator` does, on the coordinator user's connection, and waits
// until it serves.
func (d *deployment) startCoordinator(t *testing.T) {
	t.Helper()
	d.coord = d.runCoordinator(t, d.srv, "coordinator", d.rootOptions("root-1"))
	d.coordErrs, d.stopCoord = d.coord.errs, d.coord.stop
}

// rootOptions are the options of the root's replica id.
func (d *deployment) rootOptions(id string) coordinator.Options {
	o := d.opts
	o.Node, o.ServerID = "root", id
	return o
}

// coord is a running coordinator replica of the suite.
type coord struct {
	id   string
	nc   *nats.Conn
	rep  *coordinator.Replica
	errs *asyncErrors // its connection's asynchronous errors
	log  *lineLog     // its log, warnings and above
	// serving is sent the replica's every change of serving, in order.
	serving chan bool
	// ended is closed when the replica's Run returned, with runErr.
	ended  chan struct{}
	runErr error
	// stop stops the replica (it resigns) and waits for it.
	stop func()
}

// waitServing waits until the replica's serving changes to on.
func (c *coord) waitServing(t *testing.T, on bool) {
	t.Helper()
	deadline := time.After(3 * wait)
	for {
		select {
		case s := <-c.serving:
			if s == on {
				return
			}
		case <-c.ended:
			t.Fatalf("replica %s stopped: %v (refused: %v)", c.id, c.runErr, c.errs.all())
		case <-deadline:
			t.Fatalf("replica %s never changed to serving %v (refused: %v)", c.id, on, c.errs.all())
		}
	}
}

// runCoordinator runs a replica with opts on srv as user
// (launchCoordinator) and waits until it serves; it fails the test if the
// user was refused anything on the way.
func (d *deployment) runCoordinator(t *testing.T, srv *server.Server, user string, opts coordinator.Options) *coord {
	t.Helper()
	c := d.launchCoordinator(t, srv, user, opts)
	c.waitServing(t, true)
	// A coordinator whose rights miss something it needs shows it here.
	if e := c.errs.all(); len(e) > 0 {
		t.Fatalf("the %s user was refused: %v", user, e)
	}
	return c
}

// launchCoordinator starts a replica with opts (its node, parent and
// server id) on srv as user, the way the secure setup's `allot
// coordinator --unmatched reject` does: at the root (parent "") on the
// configuration bucket, under a parent on the configuration mirror of the
// parent's bucket (created if missing, waited for until in sync), as
// cmd/allot's startTemplates does, with the watch resynced on every
// reconnect. Its connection reconnects forever, as `allot coordinator`'s.
// The replica leads or follows; the test's end stops it.
func (d *deployment) launchCoordinator(t *testing.T, srv *server.Server, user string, opts coordinator.Options) *coord {
	t.Helper()
	node, parent, id := opts.Node, opts.Parent, opts.ServerID
	c := &coord{id: id, log: &lineLog{}, serving: make(chan bool, 64), ended: make(chan struct{})}
	c.nc, c.errs = d.dial(t, srv, user, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	log := slogFor(t, c.log).With("node", node, "replica", id)
	ctx, cancel := context.WithCancel(context.Background())
	js, err := jetstream.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithTimeout(ctx, wait)
	defer ocancel()
	var kv jetstream.KeyValue
	if parent == "" {
		kv, err = configkv.OpenBucket(octx, js, "", false)
	} else if kv, err = configkv.OpenMirror(octx, js, "", parent); err == nil {
		err = configkv.WaitMirrorSynced(octx, kv)
	}
	if err != nil {
		t.Fatalf("configuration of node %s: %v (refused: %v)", node, err, c.errs.all())
	}
	w := configkv.NewWatcher(kv, config.UnmatchedReject.Fallback(), log)
	if err := w.Start(octx); err != nil {
		t.Fatal(err)
	}
	c.nc.SetReconnectHandler(func(*nats.Conn) { w.Resync() })
	opts.Templates, opts.Logger = sources.WatchedTemplates(w), log
	c.rep, err = coordinator.NewReplica(c.nc, coordinator.ReplicaOptions{
		Options:  opts,
		Election: replica.Election{OnServing: func(_ uint64, on bool) { c.serving <- on }},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c.runErr = c.rep.Run(ctx)
		close(c.ended)
	}()
	var stopOnce sync.Once
	c.stop = func() {
		stopOnce.Do(func() {
			cancel()
			<-c.ended
			if c.runErr != nil && !errors.Is(c.runErr, context.Canceled) {
				t.Errorf("coordinator %s of node %s: %v", id, node, c.runErr)
			}
			w.Stop()
		})
	}
	t.Cleanup(c.stop)
	return c
}

// slogFor logs warnings and above to the test's log and to l.
func slogFor(t *testing.T, l *lineLog) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, l), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// lineLog keeps log output by line, for a test to look for a warning.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, strings.TrimSpace(string(p)))
	l.mu.Unlock()
	return len(p), nil
}

// with returns the lines containing part.
func (l *lineLog) with(part string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, part) {
			out = append(out, line)
		}
	}
	return out
}

// testWriter sends log output to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// asyncErrors collects a connection's asynchronous errors: how NATS tells
// a client that a publish or subscription was refused.
type asyncErrors struct {
	mu   sync.Mutex
	errs []error
	seen chan struct{}
}

func newAsyncErrors() *asyncErrors { return &asyncErrors{seen: make(chan struct{}, 1)} }

func (a *asyncErrors) handler(log nats.ErrHandler) nats.ErrHandler {
	return func(nc *nats.Conn, sub *nats.Subscription, err error) {
		log(nc, sub, err)
		a.mu.Lock()
		a.errs = append(a.errs, err)
		a.mu.Unlock()
		select {
		case a.seen <- struct{}{}:
		default:
		}
	}
}

func (a *asyncErrors) all() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

// refused waits for the server's permission violation naming subject on
// this connection, the proof that the attempt was refused (rather than
// lost or timed out).
func (a *asyncErrors) refused(t *testing.T, op, subject string) {
	t.Helper()
	want := fmt.Sprintf("permissions violation for %s to %q", op, subject)
	deadline := time.After(wait)
	for {
		for _, err := range a.all() {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
				return
			}
		}
		select {
		case <-a.seen:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no refusal %q; errors: %v", want, a.all())
		}
	}
}

// clientURL is srv's client URL on the loopback address its certificate
// names (the shipped configs listen on every interface).
func clientURL(t *testing.T, srv *server.Server) string {
	t.Helper()
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("server has no client listener")
	}
	return fmt.Sprintf("tls://127.0.0.1:%d", addr.Port)
}

// dial connects to srv as user (a seed file of the setup), over TLS with
// the setup's CA and the user's private inbox prefix, logging refusals
// with agent.ErrorHandler as every allot connection does.
func (d *deployment) dial(t *testing.T, srv *server.Server, user string, extra ...nats.Option) (*nats.Conn, *asyncErrors) {
	t.Helper()
	errs := newAsyncErrors()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil)).With("user", user)
	nkey, err := nats.NkeyOptionFromSeed(d.set.Seed(user))
	if err != nil {
		t.Fatal(err)
	}
	opts := []nats.Option{nkey, nats.RootCAs(d.set.Certs.CA), nats.Name("secure suite " + user),
		nats.ErrorHandler(errs.handler(agent.ErrorHandler(log))), nats.Timeout(wait)}
	if p := secureinit.InboxPrefix(user); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(clientURL(t, srv), append(opts, extra...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
