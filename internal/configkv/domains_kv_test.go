package configkv

import (
	"fmt"
	"strings"
	"testing"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// apiHard returns the hard limit of resource "api" in domains namespace
// ns of w's current Set and the namespace's revision, or -1 when ns is
// not served.
func apiHard(w *Watcher, ns string) (int64, uint64) {
	n := w.Current().Domains()[ns]
	if n == nil {
		return -1, 0
	}
	return n.Resources["api"].Rate.Hard, n.Revision
}

func domainsStatus(t *testing.T, w *Watcher, ns string) KeyStatus {
	t.Helper()
	for _, k := range w.Status().Keys {
		if k.Key == config.DomainsKey(ns) {
			return k
		}
	}
	t.Fatalf("no status for %s in %s", config.DomainsKey(ns), w.Status())
	return KeyStatus{}
}

// TestWatcherDomains drives domains keys through a real KV bucket: a put
// reaches Set.Domains, a hot reload publishes a new generation, a broken
// put keeps the last valid revision (reported in Status, also for a
// replica started afterwards), and a quota namespace of the same name is
// independent.
func TestWatcherDomains(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	putKey := func(key, doc string) uint64 {
		t.Helper()
		rev, err := op.Put(testCtx(t), key, []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	putNamespace(t, op, "shop", `{"default_bucket": {"size": 10}}`)
	v1 := putKey(config.DomainsKey("shop"), `{"resources": {"api": {"kind": "rate", "hard_limit": 100,
		"tiers": [{"limit": 10, "window": "1s", "active": "10s"}]}}}`)
	w := startWatcher(t, coord, nil)
	if hard, rev := apiHard(w, "shop"); hard != 100 || rev != v1 {
		t.Fatalf("initial load: hard %d revision %d, want 100 at %d", hard, rev, v1)
	}
	if n := w.Current().Quota().Namespaces["shop"]; n == nil || n.Default.Size != 10 {
		t.Fatalf("the quota namespace of the same name: %+v", n)
	}

	// Hot reload, in YAML.
	gen := w.Current().Generation
	v2 := putKey(config.DomainsKey("shop"), "allow_unconfigured: true\nresources:\n  api: {kind: rate, hard_limit: 200}\n")
	poll.Until(t, waitLimit, "revision 2 served", func() bool { hard, rev := apiHard(w, "shop"); return hard == 200 && rev == v2 })
	if w.Current().Generation <= gen || !w.Current().Domains()["shop"].AllowUnconfigured {
		t.Fatalf("reload: generation %d (was %d), namespace %+v", w.Current().Generation, gen, w.Current().Domains()["shop"])
	}

	// A broken put keeps revision 2 and is reported.
	gen = w.Current().Generation
	bad := putKey(config.DomainsKey("shop"), `{"resources": {"api": {"kind": "rate", "tiers": [{"window": "1 sec", "active": "1s"}]}}}`)
	poll.Until(t, waitLimit, "rejection recorded", func() bool { return len(domainsStatus(t, w, "shop").Rejected) == 1 })
	if hard, rev := apiHard(w, "shop"); hard != 200 || rev != v2 || w.Current().Generation != gen {
		t.Errorf("after a broken put: hard %d revision %d generation %d; want 200 at %d, generation %d", hard, rev, w.Current().Generation, v2, gen)
	}
	ks := domainsStatus(t, w, "shop")
	wantState := fmt.Sprintf("serving revision %d because revision %d is invalid: resources.api.tiers[0].window: \"1 sec\" is not a duration", v2, bad)
	if !ks.Domains || ks.Namespace || ks.Revision != v2 || !strings.HasPrefix(ks.State, wantState) {
		t.Errorf("status = %+v\nwant state %q", ks, wantState)
	}

	// A replica started now, and LoadAll, find revision 2 in the history.
	w2 := startWatcher(t, coord, nil)
	if hard, rev := apiHard(w2, "shop"); hard != 200 || rev != v2 {
		t.Errorf("fresh watcher: hard %d revision %d, want 200 at %d", hard, rev, v2)
	}
	entries, err := LoadAll(testCtx(t), op)
	if err != nil {
		t.Fatal(err)
	}
	if n := SetFromEntries(entries, nil).Domains()["shop"]; n == nil || n.Revision != v2 {
		t.Errorf("LoadAll serves %+v, want revision %d", n, v2)
	}

	// An invalid new namespace serves nothing; a delete removes one.
	putKey(config.DomainsKey("other"), `{"resources": {"x": {"kind": "semaphore"}}}`)
	poll.Until(t, waitLimit, "rejection of other", func() bool {
		for _, k := range w.Status().Keys {
			if k.Key == config.DomainsKey("other") {
				return len(k.Rejected) == 1
			}
		}
		return false
	})
	if _, ok := w.Current().Domains()["other"]; ok || !strings.Contains(domainsStatus(t, w, "other").State, "not served") {
		t.Errorf("invalid new namespace: served %v, status %+v", ok, domainsStatus(t, w, "other"))
	}
	if err := op.Delete(testCtx(t), config.DomainsKey("shop")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "namespace removed", func() bool { hard, _ := apiHard(w, "shop"); return hard == -1 })
	if n := w.Current().Quota().Namespaces["shop"]; n == nil {
		t.Error("deleting domains.shop removed the quota namespace shop")
	}
}
