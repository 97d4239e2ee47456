package configkv

import (
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/wire"
)

// TestQuotaConfigDrivesDecisions drives a namespace from a KV put through
// the watcher into the decision core, with requests decoded and replies
// encoded by the wire package: the configuration as written decides, a
// hot reload changes the decisions, an invalid put does not, and
// ExplainBucket names the bucket the core answers from.
func TestQuotaConfigDrivesDecisions(t *testing.T) {
	s := natstest.Server(t)
	coord, op := bucket(t, s)
	putNamespace(t, op, "logins", `{"buckets":{"alice":{"size":2,"fill_rate":0.001,"wait_timeout":"0s","max_debt":"0s"}},
		"dynamic_bucket_template":{"size":1,"fill_rate":0.001,"wait_timeout":"0s","max_debt":"0s"},"max_dynamic_buckets":2}`)
	putNamespace(t, op, "plain", `{"default_bucket":{"algorithm":"FIXED_WINDOW","limit":1,"window":"1h","wait_timeout":"0s"}}`)
	putNamespace(t, op, "_default", `{"default_bucket":{"size":1,"fill_rate":0.001,"wait_timeout":"0s","max_debt":"0s"}}`)
	w := startWatcher(t, coord, nil)
	table := quota.NewTable(w.Current().Quota(), quota.Options{})
	w.OnChange(func(s *config.Set) { table.SetConfig(s.Quota()) })
	now := time.Now()

	take := func(req string) string {
		t.Helper()
		var q wire.QuotaTake
		if err := wire.DecodeQuotaTake(wire.JSON, []byte(req), &q); err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		d, matched := table.Take(q.Namespace, q.Name, q.Request, now.UnixNano())
		m, err := config.ExplainBucket(w.Current().Quota(), q.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		var agree bool
		switch m.Source {
		case config.SourceNamed:
			agree = matched == q.Bucket
		case config.SourceDynamic:
			agree = matched == q.Bucket || matched == "" && d.Reason == quota.ReasonTooManyBuckets
		case config.SourceDefault:
			agree = strings.HasPrefix(matched, q.Namespace+":") && matched != q.Bucket
		case config.SourceGlobalDefault:
			agree = strings.HasPrefix(matched, quota.GlobalDefault+":")
		case config.SourceNone:
			agree = matched == "" && d.Reason == quota.ReasonNoBucket
		}
		if !agree {
			t.Errorf("%s: the core answered from %q (%+v), ExplainBucket says %s", q.Bucket, matched, d, m.Source)
		}
		return string(wire.AppendQuotaTakeResponse(nil, wire.JSON, &d, matched))
	}
	expect := func(req, want string) {
		t.Helper()
		if got := take(req); !strings.Contains(got, want) {
			t.Errorf("%s: %s, want %s", req, got, want)
		}
	}
	expect(`{"bucket":"logins:alice"}`, `"status":"OK"`)
	expect(`{"bucket":"logins:alice"}`, `"status":"OK"`)
	expect(`{"bucket":"logins:alice"}`, `"reason":"no_wait"`)                    // wait_timeout 0s
	expect(`{"bucket":"logins:alice","tokens":3}`, `"reason":"too_many_tokens"`) // max_tokens_per_request: ceil(0.001) = 1
	expect(`{"bucket":"logins:bob"}`, `"matched":"logins:bob"`)                  // dynamic
	expect(`{"bucket":"logins:carol"}`, `"status":"OK"`)
	expect(`{"bucket":"logins:dave"}`, `"reason":"too_many_buckets"`) // max_dynamic_buckets 2
	expect(`{"bucket":"plain:x"}`, `"status":"OK"`)
	expect(`{"bucket":"plain:y"}`, `"reason":"no_wait"`) // one shared default bucket
	expect(`{"bucket":"other:x"}`, `"status":"OK"`)      // global default
	expect(`{"bucket":"other:y"}`, `"reason":"no_wait"`)
	expect(`{"bucket":"_default:z"}`, `"reason":"no_wait"`) // the global default bucket itself

	// Hot reload: alice gets a larger bucket (a changed bucket restarts
	// drained, so the first take waits past its wait_timeout of 0s: the
	// reload is seen in the limit).
	putNamespace(t, op, "logins", `{"buckets":{"alice":{"size":7,"fill_rate":0.001,"wait_timeout":"0s","max_debt":"0s"}}}`)
	poll.Until(t, waitLimit, "reload reaches the table", func() bool { return strings.Contains(take(`{"bucket":"logins:alice","tokens":0}`), `"limit":7`) })
	// An invalid put changes nothing.
	gen := w.Current().Generation
	putNamespace(t, op, "logins", `{"buckets":{"alice":{"size":-7}}}`)
	poll.Until(t, waitLimit, "rejection", func() bool { return len(keyStatus(t, w, "logins").Rejected) == 1 })
	if w.Current().Generation != gen {
		t.Error("an invalid put published a new configuration")
	}
	expect(`{"bucket":"logins:alice","tokens":0}`, `"limit":7`)
	// bob's dynamic bucket is gone with the template: the global default answers.
	expect(`{"bucket":"logins:bob","tokens":0}`, `"matched":"_default:`)
	// Without a global default, unknown namespaces get no bucket.
	if err := op.Delete(testCtx(t), config.NamespaceKey(quota.GlobalDefault)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLimit, "global default removed", func() bool { return w.Current().Quota().Namespaces[quota.GlobalDefault] == nil })
	// The table hears of it in the watcher's OnChange, after Current.
	poll.Until(t, waitLimit, "the table to drop the global default", func() bool {
		var q wire.QuotaTake
		if err := wire.DecodeQuotaTake(wire.JSON, []byte(`{"bucket":"probe:p","tokens":0}`), &q); err != nil {
			t.Fatal(err)
		}
		_, matched := table.Take(q.Namespace, q.Name, q.Request, now.UnixNano())
		return matched == ""
	})
	expect(`{"bucket":"other:x"}`, `"reason":"no_bucket"`)
}
