package configkv

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// TestVerdicts: a watcher that publishes verdicts writes, for every key
// of the configuration bucket, whether its newest revision was applied,
// every problem of a rejected one, and that a key with an unknown prefix
// is ignored (also in Status); a deleted key's verdict goes, as do
// verdicts of keys deleted while no watcher ran.
func TestVerdicts(t *testing.T) {
	s := natstest.Server(t)
	ctx := testCtx(t)
	kv, op := bucket(t, s)
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	state, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "allot_state"})
	if err != nil {
		t.Fatal(err)
	}
	// A verdict left by a watcher that ran before, of a key now gone.
	if _, err := state.Put(ctx, StatusKey("root", "templates.gone"), []byte(`{"key":"templates.gone","revision":1,"ok":true,"state":"ok"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Put(ctx, "templates.db", []byte(mysqlMain)); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(kv, nil, testLogger(t))
	w.PublishVerdicts(js, "allot_state", "root")
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	verdict := func(key string) (Verdict, bool) {
		e, err := state.Get(ctx, StatusKey("root", key))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Verdict{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		var v Verdict
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			t.Fatalf("verdict of %s: %v: %s", key, err, e.Value())
		}
		return v, true
	}
	waitVerdict := func(key string, rev uint64, check func(Verdict) bool) Verdict {
		t.Helper()
		var v Verdict
		poll.Until(t, waitLimit, "the verdict on "+key, func() bool {
			var ok bool
			v, ok = verdict(key)
			return ok && v.Revision == rev && check(v)
		})
		return v
	}
	poll.Until(t, waitLimit, "the stale verdict deleted", func() bool { _, ok := verdict("templates.gone"); return !ok })
	dbRev, _ := kv.Get(ctx, "templates.db")
	waitVerdict("templates.db", dbRev.Revision(), func(v Verdict) bool { return v.OK && v.State == "ok" && len(v.Errors) == 0 })

	bad, err := op.Put(ctx, "templates.db", []byte(`{"identifier_glob": "db", "capacity": -5, "algorithm": {"kind": "FAIR_SHAER"}}`))
	if err != nil {
		t.Fatal(err)
	}
	v := waitVerdict("templates.db", bad, func(v Verdict) bool { return !v.OK })
	if len(v.Errors) != 2 || !strings.Contains(v.Errors[0], "FAIR_SHAER") || !strings.Contains(v.Errors[1], "capacity: -5 is negative") ||
		!strings.HasPrefix(v.State, "serving revision ") {
		t.Errorf("verdict on the bad put: %+v", v)
	}

	typo, err := op.Put(ctx, "tempaltes.typo", []byte(mysqlMain))
	if err != nil {
		t.Fatal(err)
	}
	v = waitVerdict("tempaltes.typo", typo, func(v Verdict) bool { return !v.OK })
	if len(v.Errors) != 1 || !strings.Contains(v.Errors[0], `did you mean "templates.typo"`) {
		t.Errorf("verdict on the misspelt key: %+v", v)
	}
	if u := w.Status().Unknown; len(u) != 1 || u[0].Key != "tempaltes.typo" || u[0].Revision != typo {
		t.Errorf("Status().Unknown = %+v", u)
	}

	for _, key := range []string{"tempaltes.typo", "templates.db"} {
		if err := op.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, waitLimit, "the verdict on "+key+" deleted", func() bool { _, ok := verdict(key); return !ok })
	}
	if u := w.Status().Unknown; len(u) != 0 {
		t.Errorf("Status().Unknown after the delete = %+v", u)
	}
	keys, err := state.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for k := range keys.Keys() {
		left = append(left, k)
	}
	if slices.ContainsFunc(left, func(k string) bool { return strings.Contains(k, StatusKeyInfix) }) {
		t.Errorf("verdicts left: %q", left)
	}
}
