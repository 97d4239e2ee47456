package configkv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// mirrorAt opens the configuration mirror of level l under parent.
func mirrorAt(t *testing.T, l *natstest.Level, parent string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(natstest.Conn(t, l.Server))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := OpenMirror(testCtx(t), js, DefaultBucket, parent)
	if err != nil {
		t.Fatalf("%s: OpenMirror: %v", l.Opts.Domain, err)
	}
	return kv
}

func capacityOf(w *Watcher, id string) float64 {
	if t := w.Current().Match(id); t != nil {
		return t.Capacity
	}
	return -1
}

const mysqlMain700 = `{"identifier_glob":"mysql/main","capacity":700,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`
const mysqlMain900 = `{"identifier_glob":"mysql/main","capacity":900,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`

// TestMirrorDownTheTree: a template put once at the root reaches watchers
// of the mirror at the second and third levels (a mirror of a mirror); an
// invalid put is rejected there with the last valid revision serving, from
// the mirror's history; with the middle level's link cut both lower levels
// keep their configuration; after the link is restored a later put
// arrives; and a put through OpenOrigin at the third level lands at the
// root.
func TestMirrorDownTheTree(t *testing.T) {
	ctx := testCtx(t)
	root := natstest.Root(t, "global")
	region := natstest.Child(t, "eu", root)
	cluster := natstest.Child(t, "eu-1", region)

	rootKV, _ := bucket(t, root.Server)
	put(t, rootKV, "seeded", mysqlMain700)
	regionKV := mirrorAt(t, region, "global")
	clusterKV := mirrorAt(t, cluster, "eu")
	// A level that waits for its new mirror to sync starts with the
	// root's templates.
	for _, kv := range []jetstream.KeyValue{regionKV, clusterKV} {
		if err := WaitMirrorSynced(ctx, kv); err != nil {
			t.Fatal(err)
		}
		if e, err := kv.Get(ctx, config.Key("seeded")); err != nil || string(e.Value()) != mysqlMain700 {
			t.Fatalf("synced mirror lacks the root's template: %v", err)
		}
	}
	regionW := startWatcher(t, regionKV, nil)
	clusterW := startWatcher(t, clusterKV, nil)

	put(t, rootKV, "mysql-main", mysqlMain)
	for _, w := range []*Watcher{regionW, clusterW} {
		poll.Until(t, waitLimit, "capacity 500 down the tree", func() bool { return capacityOf(w, "mysql/main") == 500 })
	}
	bad := put(t, rootKV, "mysql-main", `{"identifier_glob":"mysql/main","capacity":-1}`)
	for _, w := range []*Watcher{regionW, clusterW} {
		poll.Until(t, waitLimit, "rejection of the invalid revision", func() bool {
			r := keyStatus(t, w, "mysql-main").Rejected
			return len(r) == 1 && r[0].Revision == bad
		})
		if c := capacityOf(w, "mysql/main"); c != 500 {
			t.Fatalf("after an invalid put: capacity %v, want the last valid 500", c)
		}
	}

	region.Cut(t)
	put(t, rootKV, "mysql-main", mysqlMain700)
	time.Sleep(500 * time.Millisecond) // what would have been enough to see it
	for _, w := range []*Watcher{regionW, clusterW} {
		if c := capacityOf(w, "mysql/main"); c != 500 {
			t.Fatalf("link cut: capacity %v, want the last valid 500 kept", c)
		}
	}
	// A fresh watcher of the cut-off mirror (a replica starting now) also
	// serves what the mirror holds.
	if c := capacityOf(startWatcher(t, clusterKV, nil), "mysql/main"); c != 500 {
		t.Fatalf("fresh watcher, link cut: capacity %v, want 500", c)
	}
	// Writes through the mirror need the root: with the link cut they fail.
	if _, _, err := OpenOrigin(ctx, natstest.Conn(t, cluster.Server), DefaultBucket, false); err == nil {
		t.Fatal("OpenOrigin with the link to the root cut succeeded")
	}

	restored := time.Now()
	region.Restore(t)
	for _, w := range []*Watcher{regionW, clusterW} {
		poll.Until(t, waitLimit, "the put made while cut, after restore", func() bool { return capacityOf(w, "mysql/main") == 700 })
	}
	t.Logf("the put made while cut applied at both levels %v after the link was re-enabled", time.Since(restored))
	origin, domain, err := OpenOrigin(ctx, natstest.Conn(t, cluster.Server), DefaultBucket, false)
	if err != nil {
		t.Fatal(err)
	}
	if domain != "global" {
		t.Fatalf("origin domain %q, want global", domain)
	}
	put(t, origin, "mysql-main", mysqlMain900)
	e, err := rootKV.Get(ctx, config.Key("mysql-main"))
	if err != nil || !strings.Contains(string(e.Value()), "900") {
		t.Fatalf("root after a put through the origin at the third level: %v %v", e, err)
	}
	for _, w := range []*Watcher{regionW, clusterW} {
		poll.Until(t, waitLimit, "a put made at the third level, back down", func() bool { return capacityOf(w, "mysql/main") == 900 })
	}
}

// TestWaitMirrorSynced: a level whose parent is unreachable when it
// starts waits for it before creating its mirror, so the mirror syncs as
// soon as the link comes up, not after nats-server's retry backoff (about
// 40s when created while cut off, as before the wait).
func TestWaitMirrorSynced(t *testing.T) {
	ctx := testCtx(t)
	root := natstest.Root(t, "global")
	rootKV, _ := bucket(t, root.Server)
	put(t, rootKV, "mysql-main", mysqlMain)
	region := natstest.Child(t, "eu", root)
	region.Cut(t)
	js, err := jetstream.New(natstest.Conn(t, region.Server))
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan jetstream.KeyValue, 1)
	go func() {
		kv, err := OpenMirror(ctx, js, DefaultBucket, "global")
		if err != nil {
			t.Error(err)
		}
		opened <- kv
	}()
	time.Sleep(500 * time.Millisecond)
	region.Restore(t)
	kv := <-opened
	if kv == nil {
		t.FailNow()
	}
	sctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := WaitMirrorSynced(sctx, kv); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, config.Key("mysql-main")); err != nil {
		t.Fatalf("synced mirror: %v", err)
	}
	// A plain bucket is synced at once.
	if err := WaitMirrorSynced(ctx, rootKV); err != nil {
		t.Fatal(err)
	}
}

// TestOpenMirrorRefusesPlainBucket: a child level whose bucket is a plain
// bucket (it was a root before) is not silently used: its templates would
// shadow the root's.
func TestOpenMirrorRefusesPlainBucket(t *testing.T) {
	root := natstest.Root(t, "global")
	bucket(t, root.Server)
	region := natstest.Child(t, "eu", root)
	bucket(t, region.Server)
	js, err := jetstream.New(natstest.Conn(t, region.Server))
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenMirror(testCtx(t), js, DefaultBucket, "global")
	if err == nil || !strings.Contains(err.Error(), "is not a mirror of domain global") || !strings.Contains(err.Error(), "--mirror-domain global") {
		t.Fatalf("OpenMirror over a plain bucket: %v", err)
	}
	// A mirror of another parent is refused too.
	other := natstest.Child(t, "us", root)
	js, err = jetstream.New(natstest.Conn(t, other.Server))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMirror(testCtx(t), js, DefaultBucket, "global"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMirror(testCtx(t), js, DefaultBucket, "eu"); err == nil || !strings.Contains(err.Error(), "not allot_config in domain eu") {
		t.Fatalf("OpenMirror of another parent: %v", err)
	}
	if _, err := OpenMirror(testCtx(t), js, DefaultBucket, ""); err == nil {
		t.Fatal("empty parent accepted")
	}
}

// TestMirrorDomainForm checks the warning of nats.go issue 1591 (a
// cross-domain mirror set up with StreamSource.Domain failing with 10052
// "detected cycle") against the versions in go.mod: nats.go's jetstream
// package turns Domain into the same External.APIPrefix OpenMirror sets,
// and both forms sync. OpenMirror uses the explicit prefix either way.
func TestMirrorDomainForm(t *testing.T) {
	ctx := testCtx(t)
	_, _, js := rootAndRegion(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: DefaultBucket, History: BucketHistory,
		Mirror: &jetstream.StreamSource{Name: DefaultBucket, Domain: "global"}})
	if err != nil {
		t.Fatalf("mirror with StreamSource.Domain: %v", err)
	}
	// OpenMirror accepts it as the same mirror.
	if _, err := OpenMirror(ctx, js, DefaultBucket, "global"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "the Domain-form mirror to fill", func() bool {
		_, err := kv.Get(ctx, config.Key("mysql-main"))
		return err == nil
	})
}

// TestMirrorCatchesUpAfterLongCut: a link cut for longer than nats-server's
// 10s source health check. With its own ephemeral consumer the mirror
// then backed off for minutes (a put made during a 15s cut had not arrived
// 120s after the restore); through the durable consumer allot creates at
// the parent it catches up within seconds.
func TestMirrorCatchesUpAfterLongCut(t *testing.T) {
	if testing.Short() {
		t.Skip("cuts a link for 12s")
	}
	ctx := testCtx(t)
	rootKV, region, js := rootAndRegion(t)
	kv, err := OpenMirror(ctx, js, DefaultBucket, "global")
	if err != nil {
		t.Fatal(err)
	}
	m, err := mirrorOf(ctx, kv)
	if err != nil || m == nil || m.Consumer == nil {
		t.Fatalf("mirror source %+v (%v): want a durable consumer at the parent", m, err)
	}
	w := startWatcher(t, kv, nil)
	poll.Until(t, waitLimit, "the root's template", func() bool { return capacityOf(w, "mysql/main") == 500 })
	region.Cut(t)
	time.Sleep(12 * time.Second)
	put(t, rootKV, "mysql-main", mysqlMain700)
	restored := time.Now()
	region.Restore(t)
	poll.Until(t, 10*time.Second, "the put made during a 12s cut to arrive after the restore", func() bool {
		return capacityOf(w, "mysql/main") == 700
	})
	t.Logf("the put made during the cut arrived %v after the restore", time.Since(restored))
}

// rootAndRegion starts a root level (domain global) whose bucket holds
// mysql-main, and a region (domain eu) under it; js is the region's.
func rootAndRegion(t *testing.T) (jetstream.KeyValue, *natstest.Level, jetstream.JetStream) {
	t.Helper()
	root := natstest.Root(t, "global")
	rootKV, _ := bucket(t, root.Server)
	put(t, rootKV, "mysql-main", mysqlMain)
	region := natstest.Child(t, "eu", root)
	js, err := jetstream.New(natstest.Conn(t, region.Server))
	if err != nil {
		t.Fatal(err)
	}
	return rootKV, region, js
}
