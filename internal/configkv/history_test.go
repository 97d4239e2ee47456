package configkv

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

func keyStatus(t *testing.T, w *Watcher, name string) KeyStatus {
	t.Helper()
	for _, k := range w.Status().Keys {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("no status for key %s in %s", name, w.Status())
	return KeyStatus{}
}

func put(t *testing.T, kv jetstream.KeyValue, name, doc string) uint64 {
	t.Helper()
	rev, err := kv.Put(testCtx(t), config.Key(name), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestFreshWatcherServesLastValidRevision: a valid put
// of capacity 500 followed by an invalid one (capacity -1); a replica that
// starts afterwards must serve 500 from the key's history, not the
// built-in default.
func TestFreshWatcherServesLastValidRevision(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	good := put(t, op, "lim", `{"identifier_glob":"lim","capacity":500,"algorithm":{"kind":"FAIR_SHARE"}}`)
	bad := put(t, op, "lim", `{"identifier_glob":"lim","capacity":-1,"algorithm":{"kind":"FAIR_SHARE"}}`)

	w := startWatcher(t, coord, config.DefaultTemplate())
	got := w.Current().Match("lim")
	if got == nil || got.Name != "lim" || got.Capacity != 500 || got.Revision != good {
		t.Fatalf("fresh watcher serves %+v, want lim revision %d capacity 500", got, good)
	}
	ks := keyStatus(t, w, "lim")
	want := fmt.Sprintf("serving revision %d because revision %d is invalid: capacity: -1 is negative", good, bad)
	if ks.Revision != good || ks.State != want || len(ks.Rejected) != 1 || ks.Rejected[0].Revision != bad {
		t.Errorf("status %+v, want state %q", ks, want)
	}

	// LoadAll (config explain, list) sees what the replicas serve.
	entries, err := LoadAll(testCtx(t), op)
	if err != nil {
		t.Fatal(err)
	}
	if m := SetFromEntries(entries, config.DefaultTemplate()).Match("lim"); m == nil || m.Revision != good {
		t.Errorf("LoadAll set serves %+v", m)
	}
}

// TestNoValidRevisionRefuses: a key with no valid revision in its history
// refuses the resources its glob wins, on load and on hot reload, instead
// of leaving them to another template or the fallback. A delete ends the
// history that counts.
func TestNoValidRevisionRefuses(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	put(t, op, "any", `{"identifier_glob":"*","capacity":1000,"algorithm":{"kind":"FAIR_SHARE"}}`)
	put(t, op, "redis", "identifier_glob: \"redis/*\"\ncapacity: -1\nalgorithm:\n  kind: FAIR_SHARE\n")
	put(t, op, "pg", `{"identifier_glob":"pg/*","capacity":5,"algorithm":{"kind":"FAIR_SHARE"}}`)
	if err := op.Delete(testCtx(t), config.Key("pg")); err != nil {
		t.Fatal(err)
	}
	put(t, op, "pg", `{"identifier_glob":"pg/*","capacity":-5}`)
	put(t, op, "garbled", `{"capacity":-1}`) // no glob: nothing to refuse

	w := startWatcher(t, coord, config.DefaultTemplate())
	set := w.Current()
	for _, id := range []string{"redis/a", "pg/main"} {
		if m := set.Match(id); m != nil {
			t.Errorf("%s served by %s (capacity %g), want refused", id, m.Name, m.Capacity)
		}
		if r := set.Refused(id); !strings.Contains(r, "no valid revision") {
			t.Errorf("%s: Refused = %q", id, r)
		}
	}
	if m := set.Match("mysql/x"); m == nil || m.Name != "any" {
		t.Errorf("mysql/x: %+v", m)
	}
	if r := set.Refused("mysql/x"); r != "" {
		t.Errorf("mysql/x refused: %s", r)
	}
	ks := keyStatus(t, w, "redis")
	if ks.Revision != 0 || ks.Glob != "redis/*" || ks.Refused == "" || !strings.HasPrefix(ks.State, `refusing resources matching "redis/*"`) {
		t.Errorf("redis status %+v", ks)
	}
	if ks := keyStatus(t, w, "garbled"); ks.Refused != "" || !strings.Contains(ks.State, "cannot be read") {
		t.Errorf("garbled status %+v", ks)
	}
	entries, err := LoadAll(testCtx(t), op)
	if err != nil {
		t.Fatal(err)
	}
	if r := SetFromEntries(entries, config.DefaultTemplate()).Refused("redis/b"); r == "" {
		t.Error("LoadAll set does not refuse redis/b")
	}

	// Hot reload: a new key that is invalid from the start refuses too;
	// a valid put lifts the refusal.
	put(t, op, "kafka", `{"identifier_glob":"kafka/*","capacity":1e300}`)
	poll.Until(t, waitLimit, "kafka refused", func() bool { return w.Current().Refused("kafka/x") != "" })
	if m := w.Current().Match("kafka/x"); m != nil {
		t.Errorf("kafka/x served by %s", m.Name)
	}
	put(t, op, "kafka", `{"identifier_glob":"kafka/*","capacity":7,"algorithm":{"kind":"FAIR_SHARE"}}`)
	poll.Until(t, waitLimit, "kafka served", func() bool { m := w.Current().Match("kafka/x"); return m != nil && m.Capacity == 7 })
	if r := w.Current().Refused("kafka/x"); r != "" {
		t.Errorf("kafka/x still refused: %s", r)
	}
	// Deleting a refused key lifts its refusal.
	if err := op.Delete(testCtx(t), config.Key("redis")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "redis refusal lifted", func() bool { m := w.Current().Match("redis/a"); return m != nil && m.Name == "any" })
}

// deafKV drops the entries of its watches while deaf is set, as a watch
// that was down would miss them.
type deafKV struct {
	jetstream.KeyValue
	deaf    atomic.Bool
	dropped atomic.Int64
}

type deafWatcher struct {
	jetstream.KeyWatcher
	out chan jetstream.KeyValueEntry
}

func (w deafWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.out }

func (d *deafKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kw, err := d.KeyValue.Watch(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan jetstream.KeyValueEntry)
	go func() {
		defer close(out)
		for e := range kw.Updates() {
			if e != nil && d.deaf.Load() {
				d.dropped.Add(1)
				continue
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return deafWatcher{kw, out}, nil
}

// TestResyncServesNewestValidRevision: a valid and then an invalid put
// missed while the watch was down; after the resync the watcher serves the
// valid one it missed (from the history), not the older one it had.
func TestResyncServesNewestValidRevision(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	put(t, op, "lim", `{"identifier_glob":"lim","capacity":500,"algorithm":{"kind":"FAIR_SHARE"}}`)
	dk := &deafKV{KeyValue: coord}
	w := startWatcher(t, dk, config.DefaultTemplate())
	if m := w.Current().Match("lim"); m.Capacity != 500 {
		t.Fatalf("capacity %g", m.Capacity)
	}
	dk.deaf.Store(true)
	missed := put(t, op, "lim", `{"identifier_glob":"lim","capacity":700,"algorithm":{"kind":"FAIR_SHARE"}}`)
	put(t, op, "lim", `{"identifier_glob":"lim","capacity":-1}`)
	poll.Until(t, waitLimit, "both puts missed", func() bool { return dk.dropped.Load() == 2 })
	dk.deaf.Store(false)
	w.Resync()
	poll.Until(t, waitLimit, "the missed valid revision to serve", func() bool { return w.Current().Match("lim").Revision == missed })
	if m := w.Current().Match("lim"); m.Capacity != 700 || w.Status().Resyncs == 0 {
		t.Errorf("after resync: capacity %g, %d resyncs", m.Capacity, w.Status().Resyncs)
	}
}
