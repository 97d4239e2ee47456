package configkv

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

func putNamespace(t *testing.T, kv jetstream.KeyValue, ns, doc string) uint64 {
	t.Helper()
	rev, err := kv.Put(testCtx(t), config.NamespaceKey(ns), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// defaultSize returns the size of namespace ns's default bucket in w's
// current Set and the namespace's revision, or -1 when ns is not served.
func defaultSize(w *Watcher, ns string) (int64, uint64) {
	n := w.Current().Quota().Namespaces[ns]
	if n == nil || n.Default == nil {
		return -1, 0
	}
	return n.Default.Size, n.Revision
}

// TestWatcherNamespaces drives namespace keys through a real KV bucket:
// hot reload, an invalid put that keeps the last valid revision (and is
// reported), a restart that finds that revision in the history, a delete,
// and templates next to namespaces.
func TestWatcherNamespaces(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	put(t, op, "lim", `{"identifier_glob":"lim","capacity":500,"algorithm":{"kind":"FAIR_SHARE"}}`)
	if _, err := op.Put(testCtx(t), "other.key", []byte("not allot's")); err != nil {
		t.Fatal(err)
	}
	v1 := putNamespace(t, op, "logins", `{"default_bucket": {"size": 10}}`)
	w := startWatcher(t, coord, config.DefaultTemplate())
	if size, rev := defaultSize(w, "logins"); size != 10 || rev != v1 {
		t.Fatalf("initial load: size %d revision %d, want 10 at %d", size, rev, v1)
	}
	if m := w.Current().Match("lim"); m == nil || m.Capacity != 500 {
		t.Fatalf("templates next to namespaces: lim = %+v", m)
	}

	// Hot reload.
	v2 := putNamespace(t, op, "logins", "default_bucket:\n  size: 20\n")
	poll.Until(t, waitLimit, "revision 2 served", func() bool { size, rev := defaultSize(w, "logins"); return size == 20 && rev == v2 })
	gen := w.Current().Generation

	// An invalid put keeps revision 2 and is reported.
	bad := putNamespace(t, op, "logins", `{"default_bucket": {"size": -1}}`)
	poll.Until(t, waitLimit, "rejection recorded", func() bool { return len(keyStatus(t, w, "logins").Rejected) == 1 })
	if size, rev := defaultSize(w, "logins"); size != 20 || rev != v2 {
		t.Errorf("after an invalid put: size %d revision %d, want 20 at %d", size, rev, v2)
	}
	if w.Current().Generation != gen {
		t.Errorf("an invalid put published a new set (generation %d, was %d)", w.Current().Generation, gen)
	}
	ks := keyStatus(t, w, "logins")
	wantState := fmt.Sprintf("serving revision %d because revision %d is invalid: default_bucket.size: -1 is outside", v2, bad)
	if !ks.Namespace || ks.Revision != v2 || !strings.HasPrefix(ks.State, wantState) || ks.Rejected[0].Revision != bad {
		t.Errorf("status = %+v, want state %q", ks, wantState)
	}

	// A replica started now finds revision 2 in the history.
	w2 := startWatcher(t, coord, config.DefaultTemplate())
	if size, rev := defaultSize(w2, "logins"); size != 20 || rev != v2 {
		t.Errorf("fresh watcher: size %d revision %d, want 20 at %d", size, rev, v2)
	}
	entries, err := LoadAll(testCtx(t), op)
	if err != nil {
		t.Fatal(err)
	}
	if n := SetFromEntries(entries, nil).Quota().Namespaces["logins"]; n == nil || n.Revision != v2 {
		t.Errorf("LoadAll serves %+v, want revision %d", n, v2)
	}
	for _, e := range entries {
		if e.Key == "other.key" {
			t.Errorf("LoadAll returned a key that is neither a template nor a namespace: %+v", e)
		}
	}

	// A valid put clears the rejections; a delete removes the namespace.
	putNamespace(t, op, "logins", `{"default_bucket": {"size": 30}}`)
	poll.Until(t, waitLimit, "revision 4 served", func() bool { size, _ := defaultSize(w, "logins"); return size == 30 })
	if r := keyStatus(t, w, "logins").Rejected; len(r) != 0 {
		t.Errorf("rejections after a valid put: %+v", r)
	}
	if err := op.Delete(testCtx(t), config.NamespaceKey("logins")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "namespace removed", func() bool { size, _ := defaultSize(w, "logins"); return size == -1 })
	if m := w.Current().Match("lim"); m == nil || m.Capacity != 500 {
		t.Errorf("templates lost with the namespace: lim = %+v", m)
	}
}

// TestInvalidNewNamespaceChangesNothing: an invalid first revision, with
// nothing valid in its history, serves nothing (the namespace's keys get
// the global default as before the put) and is reported.
func TestInvalidNewNamespaceChangesNothing(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	putNamespace(t, op, "_default", `{"default_bucket": {"size": 5}}`)
	w := startWatcher(t, coord, nil)
	gen := w.Current().Generation
	putNamespace(t, op, "logins", `{"buckets": {"a": {"fill_rate": "fast"}}}`)
	poll.Until(t, waitLimit, "rejection recorded", func() bool {
		for _, k := range w.Status().Keys {
			if k.Name == "logins" {
				return len(k.Rejected) == 1
			}
		}
		return false
	})
	if _, ok := w.Current().Quota().Namespaces["logins"]; ok || w.Current().Generation != gen {
		t.Errorf("an invalid new namespace is served (generation %d, was %d)", w.Current().Generation, gen)
	}
	ks := keyStatus(t, w, "logins")
	if ks.Revision != 0 || !strings.Contains(ks.State, "global default") {
		t.Errorf("status = %+v", ks)
	}
	m, err := config.ExplainBucket(w.Current().Quota(), "logins:a")
	if err != nil || m.Source != config.SourceGlobalDefault || m.Spec.Size != 5 {
		t.Errorf("logins:a = %+v, %v; want the global default", m, err)
	}
}
