package configkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

const waitLimit = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testLogger sends slog output to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// bucket opens a fresh bucket on a fresh server through one connection,
// and returns a second, independent connection's view of it: the
// operator's.
func bucket(t *testing.T, s *server.Server) (coordinator, operator jetstream.KeyValue) {
	t.Helper()
	ctx := testCtx(t)
	open := func() jetstream.KeyValue {
		js, err := jetstream.New(natstest.Conn(t, s))
		if err != nil {
			t.Fatal(err)
		}
		kv, err := OpenBucket(ctx, js, DefaultBucket, true)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	return open(), open()
}

func startWatcher(t *testing.T, kv jetstream.KeyValue, fallback *config.Template) *Watcher {
	t.Helper()
	w := NewWatcher(kv, fallback, testLogger(t))
	if err := w.Start(testCtx(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(w.Stop)
	return w
}

func matchName(w *Watcher, id string) string {
	if t := w.Current().Match(id); t != nil {
		return t.Name
	}
	return "<nil>"
}

const mysqlMain = `{"identifier_glob":"mysql/main","capacity":500,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`

func TestOpenBucket(t *testing.T) {
	s := natstest.Server(t)
	ctx := testCtx(t)
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBucket(ctx, js, "", false); err == nil {
		t.Fatal("OpenBucket without create on a missing bucket succeeded")
	}
	kv, err := OpenBucket(ctx, js, "", true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bucket() != DefaultBucket || st.History() < 10 {
		t.Errorf("bucket %s history %d", st.Bucket(), st.History())
	}
	if info := st.(*jetstream.KeyValueBucketStatus).StreamInfo(); info.Config.Storage != jetstream.FileStorage {
		t.Errorf("storage = %v", info.Config.Storage)
	}
	if _, err := OpenBucket(ctx, js, "", true); err != nil {
		t.Errorf("second OpenBucket: %v", err)
	}
}

func TestWatcherLifecycle(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	ctx := testCtx(t)

	// A value present before Start is loaded by the time Start returns.
	if _, err := op.Put(ctx, config.Key("mysql-main"), []byte(mysqlMain)); err != nil {
		t.Fatal(err)
	}
	w := startWatcher(t, coord, config.DefaultTemplate())
	if got := matchName(w, "mysql/main"); got != "mysql-main" {
		t.Fatalf("after Start: Match = %s", got)
	}
	if got := matchName(w, "other"); got != "builtin:default" {
		t.Fatalf("unmatched: Match = %s, want fallback", got)
	}
	gen := w.Current().Generation
	if gen == 0 {
		t.Fatal("generation 0 after Start")
	}

	// Put of a new, lower-precedence glob.
	rev, err := op.Put(ctx, config.Key("mysql-any"), []byte("identifier_glob: \"mysql/*\"\ncapacity: 50\nalgorithm:\n  kind: PROPORTIONAL_SHARE\n"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Updates():
	case <-time.After(waitLimit):
		t.Fatal("no update notification")
	}
	poll.Until(t, waitLimit, "mysql-any", func() bool { return matchName(w, "mysql/replica") == "mysql-any" })
	if got := matchName(w, "mysql/main"); got != "mysql-main" {
		t.Errorf("exact lost to glob: %s", got)
	}
	if w.Current().Generation <= gen {
		t.Errorf("generation did not grow: %d", w.Current().Generation)
	}
	if got := w.Current().Match("mysql/x").Revision; got != rev {
		t.Errorf("revision = %d, want %d", got, rev)
	}

	// Update: the new capacity serves.
	if _, err := op.Put(ctx, config.Key("mysql-main"), []byte(strings.Replace(mysqlMain, "500", "700", 1))); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "update", func() bool { return w.Current().Match("mysql/main").Capacity == 700 })

	// Invalid put: the old version keeps serving; Status shows the error.
	badRev, err := op.Put(ctx, config.Key("mysql-main"), []byte(`{"identifier_glob":"mysql/main","capacity":-5}`))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "rejection in status", func() bool {
		for _, k := range w.Status().Keys {
			if k.Name == "mysql-main" && len(k.Rejected) > 0 {
				return true
			}
		}
		return false
	})
	if got := w.Current().Match("mysql/main"); got.Capacity != 700 {
		t.Errorf("after invalid put: capacity %g, want 700", got.Capacity)
	}
	st := w.Status()
	var ks KeyStatus
	for _, k := range st.Keys {
		if k.Name == "mysql-main" {
			ks = k
		}
	}
	if ks.Revision == 0 || ks.Revision >= badRev || ks.Rejected[0].Revision != badRev || !strings.Contains(ks.Rejected[0].Error, "capacity") {
		t.Errorf("status of mysql-main: %+v", ks)
	}
	if st.Fallback != "builtin:default" || st.Unmatched != config.UnmatchedDefault || st.Bucket != DefaultBucket {
		t.Errorf("status: %+v", st)
	}
	if _, err := json.Marshal(st); err != nil {
		t.Errorf("status does not marshal: %v", err)
	}
	t.Logf("status: %s", st)

	// A key that was never valid shows up without a revision.
	if _, err := op.Put(ctx, config.Key("broken"), []byte(`capacity: lots`)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "broken in status", func() bool {
		for _, k := range w.Status().Keys {
			if k.Name == "broken" {
				return k.Revision == 0 && len(k.Rejected) == 1
			}
		}
		return false
	})

	// A valid put after the invalid one clears the rejection.
	if _, err := op.Put(ctx, config.Key("mysql-main"), []byte(mysqlMain)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "recovery", func() bool { return w.Current().Match("mysql/main").Capacity == 500 })
	for _, k := range w.Status().Keys {
		if k.Name == "mysql-main" && len(k.Rejected) != 0 {
			t.Errorf("rejections not cleared: %+v", k)
		}
	}

	// Delete falls back to the next match, then purge to the fallback.
	if err := op.Delete(ctx, config.Key("mysql-main")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "delete", func() bool { return matchName(w, "mysql/main") == "mysql-any" })
	if err := op.Purge(ctx, config.Key("mysql-any")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "purge", func() bool { return matchName(w, "mysql/main") == "builtin:default" })

	// A stored "default" template beats the fallback.
	if _, err := op.Put(ctx, config.Key(config.DefaultTemplateName), []byte(`{"identifier_glob":"*","capacity":10,"algorithm":{"kind":"FAIR_SHARE"}}`)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "stored default", func() bool { return matchName(w, "mysql/main") == "default" })

	// Keys outside the template prefix are ignored.
	if _, err := op.Put(ctx, "other.key", []byte("x")); err != nil {
		t.Fatal(err)
	}

	w.Stop()
	w.Stop() // idempotent
	if matchName(w, "mysql/main") != "default" {
		t.Error("Current changed after Stop")
	}
}

func TestWatcherRejectPolicyAndOnChange(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	ctx := testCtx(t)
	w := NewWatcher(coord, config.UnmatchedReject.Fallback(), nil)
	changes := make(chan uint64, 16)
	w.OnChange(func(s *config.Set) { changes <- s.Generation })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.Start(ctx); err == nil {
		t.Error("second Start succeeded")
	}
	if got := w.Current().Match("x"); got != nil {
		t.Errorf("reject policy matched %v", got)
	}
	if st := w.Status(); st.Unmatched != config.UnmatchedReject || st.Fallback != "" {
		t.Errorf("status %+v", st)
	}
	if _, err := op.Put(ctx, config.Key("x"), []byte(`{"identifier_glob":"x","capacity":1,"algorithm":{"kind":"STATIC"}}`)); err != nil {
		t.Fatal(err)
	}
	g0 := <-changes // initial load
	select {
	case g := <-changes:
		if g <= g0 {
			t.Errorf("generation %d after %d", g, g0)
		}
	case <-time.After(waitLimit):
		t.Fatal("OnChange not called")
	}
}

// TestReloadLatency measures how long a put takes to reach Current. It
// logs the numbers and asserts nothing about timing.
func TestReloadLatency(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	ctx := testCtx(t)
	w := startWatcher(t, coord, config.DefaultTemplate())
	var worst, total time.Duration
	const n = 20
	for i := 1; i <= n; i++ {
		doc := strings.Replace(mysqlMain, "500", strings.Repeat("1", i%9+1), 1)
		start := time.Now()
		rev, err := op.Put(ctx, config.Key("mysql-main"), []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, waitLimit, "reload", func() bool {
			m := w.Current().Match("mysql/main")
			return m.Revision == rev
		})
		d := time.Since(start)
		total += d
		worst = max(worst, d)
	}
	t.Logf("put → Current() latency over %d puts: mean %v, worst %v", n, total/n, worst)
}

// TestWatcherSurvivesServerRestart restarts the server on the same port
// and store. One watcher gets Resync from its connection's reconnect
// handler; the other relies on nats.go's ordered consumer alone, which
// notices the lost consumer only after missing idle heartbeats (about
// 10-20s), so that half is skipped in -short mode.
func TestWatcherSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := embed.Start(embed.Options{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	url := s.ClientURL()
	port := s.Addr().(*net.TCPAddr).Port

	connect := func(opts ...nats.Option) *nats.Conn {
		opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.Timeout(2 * time.Second)}, opts...)
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := testCtx(t)
	openKV := func(nc *nats.Conn) jetstream.KeyValue {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := OpenBucket(ctx, js, DefaultBucket, true)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	var resyncing *Watcher
	ncA := connect(nats.ReconnectHandler(func(*nats.Conn) { resyncing.Resync() }))
	kvA := openKV(ncA)
	if _, err := kvA.Put(ctx, config.Key("mysql-main"), []byte(mysqlMain)); err != nil {
		t.Fatal(err)
	}
	resyncing = startWatcher(t, kvA, config.DefaultTemplate())
	plain := startWatcher(t, openKV(connect()), config.DefaultTemplate())
	for _, w := range []*Watcher{resyncing, plain} {
		if matchName(w, "mysql/main") != "mysql-main" {
			t.Fatal("not loaded")
		}
	}

	s.Shutdown()
	s.WaitForShutdown()
	poll.For(t, waitLimit, 100*time.Millisecond, func() error { // the port may linger briefly
		s, err = embed.Start(embed.Options{StoreDir: dir, Port: port})
		if err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		return nil
	})

	// The operator writes through a fresh connection after the restart.
	op := openKV(connect())
	start := time.Now()
	var rev uint64
	for {
		rev, err = op.Put(ctx, config.Key("mysql-main"), []byte(strings.Replace(mysqlMain, "500", "900", 1)))
		if err == nil {
			break
		}
		if time.Since(start) > waitLimit {
			t.Fatalf("put after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	put := time.Now()
	poll.Until(t, waitLimit, "update after restart (with Resync)", func() bool { return resyncing.Current().Match("mysql/main").Revision == rev })
	t.Logf("with Resync on reconnect: update seen %v after the put; status %s", time.Since(put), resyncing.Status())
	if err := op.Delete(ctx, config.Key("mysql-main")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "delete after restart", func() bool { return matchName(resyncing, "mysql/main") == "builtin:default" })
	if resyncing.Status().Resyncs == 0 {
		t.Error("Resyncs = 0 after a reconnect")
	}

	if testing.Short() {
		t.Skip("skipping the wait for nats.go's own ordered-consumer recovery in -short mode")
	}
	start = time.Now()
	for time.Since(start) < 40*time.Second {
		if matchName(plain, "mysql/main") == "builtin:default" {
			t.Logf("without Resync: nats.go's ordered consumer recovered; delete seen %v later", time.Since(start))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("watcher without Resync never recovered after the server restart")
}

// TestWatcherStopWhileRetrying closes the watcher's connection
// outright (the KV watcher's channel closes); the watcher is then stuck
// retrying, and Stop must still return promptly.
func TestWatcherStopWhileRetrying(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := OpenBucket(testCtx(t), js, DefaultBucket, true)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatcher(t, kv, nil)
	nc.Close()
	time.Sleep(200 * time.Millisecond)
	done := make(chan struct{})
	go func() { w.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("Stop hung")
	}
}

// stuckKV's watches never deliver anything, as when JetStream does not
// answer.
type stuckKV struct{ jetstream.KeyValue }

type stuckWatcher struct{ ch chan jetstream.KeyValueEntry }

func (w stuckWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w stuckWatcher) Stop() error                             { return nil }

func (stuckKV) Watch(context.Context, string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return stuckWatcher{make(chan jetstream.KeyValueEntry)}, nil
}

// TestStartHonoursContext: Start returns the context's error when ctx is
// already cancelled (always, not only when the watch happens to be slower
// than noticing it) and when ctx ends during an initial load that never
// completes; Stop then returns and Current still serves the fallback.
func TestStartHonoursContext(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	if _, err := op.Put(testCtx(t), config.Key("mysql-main"), []byte(mysqlMain)); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 { // the race the old code lost only sometimes
		w := NewWatcher(coord, config.DefaultTemplate(), nil)
		if err := w.Start(cancelled); !errors.Is(err, context.Canceled) {
			t.Fatalf("Start with a cancelled context: %v, want context.Canceled", err)
		}
		w.Stop()
		if got := matchName(w, "mysql/main"); got != "builtin:default" {
			t.Fatalf("after a failed Start, Match = %s", got)
		}
	}

	w := NewWatcher(stuckKV{coord}, config.DefaultTemplate(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start with a stuck initial load: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Start did not return when its context ended")
	}
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(waitLimit):
		t.Fatal("Stop after a failed Start hangs")
	}
	if w.Current().Generation != 0 || matchName(w, "x") != "builtin:default" {
		t.Errorf("after a failed Start: generation %d", w.Current().Generation)
	}
}

func TestLoadAllAndSeed(t *testing.T) {
	s := natstest.Server(t)
	_, op := bucket(t, s)
	ctx := testCtx(t)
	dir := fstest.MapFS{
		"default.yaml":    {Data: []byte("identifier_glob: \"*\"\ncapacity: 100\nalgorithm:\n  kind: FAIR_SHARE\n")},
		"mysql-main.json": {Data: []byte(mysqlMain)},
		"README.md":       {Data: []byte("not a template")},
	}
	// An operator edit made before seeding survives it.
	if _, err := op.Put(ctx, config.Key("mysql-main"), []byte(strings.Replace(mysqlMain, "500", "42", 1))); err != nil {
		t.Fatal(err)
	}
	stored, err := SeedTemplates(ctx, op, dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(stored, ",") != "default" {
		t.Errorf("seeded %v, want [default]", stored)
	}
	// A deleted seed stays deleted.
	if err := op.Delete(ctx, config.Key("default")); err != nil {
		t.Fatal(err)
	}
	if stored, err := SeedTemplates(ctx, op, dir); err != nil || len(stored) != 0 {
		t.Errorf("second seed: %v %v", stored, err)
	}
	if _, err := op.Put(ctx, config.Key("bad"), []byte("{")); err != nil {
		t.Fatal(err)
	}
	entries, err := LoadAll(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Name != "bad" || entries[0].Err == nil || entries[1].Name != "mysql-main" || entries[1].Template.Capacity != 42 {
		t.Errorf("entries: %+v", entries)
	}
	if got := SetFromEntries(entries, nil).Match("mysql/main"); got == nil || got.Capacity != 42 {
		t.Errorf("SetFromEntries: %v", got)
	}
	// An invalid seed file fails the whole seed.
	bad := fstest.MapFS{"x.json": {Data: []byte(`{"capacity":-1,"identifier_glob":"x"}`)}}
	if _, err := SeedTemplates(ctx, op, bad); err == nil || !strings.Contains(err.Error(), "x.json") {
		t.Errorf("invalid seed: %v", err)
	}
}
