package configkv

import (
	"strings"
	"testing"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// clientLimit returns the requests_per_unit of descriptor "client" in
// Envoy domain edge as w serves it, and its revision; -1 when edge is not
// served.
func clientLimit(w *Watcher) (int64, uint64) {
	d := w.Current().EnvoyDomains()["edge"]
	if d == nil {
		return -1, 0
	}
	return int64(d.Domain.Descriptors[0].RateLimit.RequestsPerUnit), d.Revision
}

func envoyStatus(t *testing.T, w *Watcher) KeyStatus {
	t.Helper()
	for _, k := range w.Status().Keys {
		if k.Key == config.EnvoyKey("edge") {
			return k
		}
	}
	t.Fatalf("no status for envoy.edge in %s", w.Status())
	return KeyStatus{}
}

// TestWatcherEnvoy drives an Envoy domain key through a real KV bucket: a
// put reaches Set.Envoy, a hot reload publishes a new generation, a
// broken put keeps the last valid revision (also for a watcher started
// afterwards and for LoadAll), and a delete makes the domain unknown.
func TestWatcherEnvoy(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	put := func(doc string) uint64 {
		t.Helper()
		rev, err := op.Put(testCtx(t), config.EnvoyKey("edge"), []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	doc := func(n int) string {
		return "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: " + string(rune('0'+n)) + "}\n"
	}
	v1 := put(doc(5))
	w := startWatcher(t, coord, nil)
	if n, rev := clientLimit(w); n != 5 || rev != v1 {
		t.Fatalf("initial load: %d at revision %d, want 5 at %d", n, rev, v1)
	}
	cfg := w.Current().Envoy()

	v2 := put(doc(7))
	poll.Until(t, waitLimit, "revision 2 served", func() bool { n, rev := clientLimit(w); return n == 7 && rev == v2 })
	if w.Current().Envoy() == cfg {
		t.Fatal("the compiled configuration did not change with the domain")
	}

	gen := w.Current().Generation
	put("domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	poll.Until(t, waitLimit, "rejection recorded", func() bool { return len(envoyStatus(t, w).Rejected) == 1 })
	if n, rev := clientLimit(w); n != 7 || rev != v2 || w.Current().Generation != gen {
		t.Errorf("after a broken put: %d at revision %d, generation %d; want 7 at %d, generation %d", n, rev, w.Current().Generation, v2, gen)
	}
	if ks := envoyStatus(t, w); !ks.Envoy || ks.Revision != v2 || !strings.Contains(ks.State, `invalid rate limit unit "fortnight"`) {
		t.Errorf("status = %+v", ks)
	}
	w2 := startWatcher(t, coord, nil)
	if n, rev := clientLimit(w2); n != 7 || rev != v2 {
		t.Errorf("fresh watcher: %d at revision %d, want 7 at %d", n, rev, v2)
	}
	entries, err := LoadAll(testCtx(t), op)
	if err != nil {
		t.Fatal(err)
	}
	if d := SetFromEntries(entries, nil).EnvoyDomains()["edge"]; d == nil || d.Revision != v2 {
		t.Errorf("LoadAll serves %+v, want revision %d", d, v2)
	}

	if err := op.Delete(testCtx(t), config.EnvoyKey("edge")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "domain removed", func() bool { n, _ := clientLimit(w); return n == -1 })
}
