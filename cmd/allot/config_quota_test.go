package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
)

const cliLogins = "buckets:\n  alice:\n    size: 10\n    fill_rate: 1\ndynamic_bucket_template:\n  size: 5\n  fill_rate: 0.5\n  max_idle: 10m\ndefault_bucket:\n  algorithm: FIXED_WINDOW\n  limit: 100\n  window: 1m\n"

// TestConfigNamespaceCLI drives `allot config` through quota namespace
// keys: validate, put (refusing an invalid one), get, list, explain for
// each lookup outcome, an invalid value written behind the CLI's back,
// history and delete; and explain with a running replica.
func TestConfigNamespaceCLI(t *testing.T) {
	s := natstest.Server(t)
	url := s.ClientURL()
	dir := t.TempDir()
	file := filepath.Join(dir, "namespaces.logins.yaml")
	if err := os.WriteFile(file, []byte(cliLogins), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(wantOK bool, want []string, stdin string, args ...string) string {
		t.Helper()
		code, out, errs := runCLI(t, stdin, args...)
		for _, w := range want {
			if (code == 0) != wantOK || !strings.Contains(out+errs, w) {
				t.Fatalf("allot %s: exit %d, want success %v and %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantOK, w, out, errs)
			}
		}
		return out + errs
	}
	// Offline: the file name says it is a namespace; -name too.
	run(true, []string{`as namespace "logins"`, `"max_dynamic_buckets": 10000`, `"max_debt": "10s"`, "note: max_dynamic_buckets"}, "", "config", "validate", file)
	run(true, []string{`as namespace "x"`}, cliLogins, "config", "validate", "--name", "namespaces.x", "-")
	run(false, []string{"it is a valid quota namespace"}, cliLogins, "config", "validate", "-")
	run(false, []string{"buckets.alice.fill_rate: -1 is outside"}, `{"buckets":{"alice":{"fill_rate":-1}}}`, "config", "validate", "--name", "namespaces.logins", "-")

	run(true, []string{"stored namespaces.logins revision 1 (quota namespace: 1 named buckets"}, "", "config", "put", "--create-bucket", "--nats", url, "namespaces.logins", file)
	run(false, []string{"refusing invalid namespace logins: default_bucket.window: is required for FIXED_WINDOW"}, `{"default_bucket":{"algorithm":"FIXED_WINDOW","limit":5}}`, "config", "put", "--nats", url, "namespaces.logins", "-")
	run(false, []string{`namespace name "log-ins" contains "-"`}, `{}`, "config", "put", "--nats", url, "namespaces.log-ins", "-")
	run(true, []string{"stored namespaces._default revision"}, `{"default_bucket":{"size":3}}`, "config", "put", "--nats", url, "namespaces._default", "-")
	run(true, []string{"stored templates.mysql-main"}, cliMySQL, "config", "put", "--nats", url, "templates.mysql-main", "-")

	run(true, []string{"fill_rate: 0.5"}, "", "config", "get", "--nats", url, "namespaces.logins")
	run(true, []string{`"window": "1m0s"`, `"max_tokens_per_request": 100`}, "", "config", "get", "--normalized", "--nats", url, "namespaces.logins")
	run(true, []string{"mysql-main", "QUOTA NAMESPACE", "namespaces.logins", "FIXED_WINDOW", "TOKEN_BUCKET, at most 10000"}, "", "config", "list", "--nats", url)

	explain := func(bucket string, want ...string) {
		t.Helper()
		run(true, want, "", "config", "explain", "--wait", "0", "--nats", url, bucket)
	}
	explain("logins:alice", "answered by: named", "buckets.alice of namespaces.logins revision 1", `"size": 10`, "namespaces.logins: revision 1", "namespaces._default: revision 2")
	explain("logins:bob", "answered by: dynamic", "at most 10000 live at once", `"max_idle": "10m0s"`)
	explain("other:x", "answered by: global default", "namespaces._default revision 2", `"size": 3`, "namespaces.other: not stored")
	run(false, []string{`bucket name "al-ice" contains "-"`}, "", "config", "explain", "--wait", "0", "--nats", url, "logins:al-ice")
	// --resource explains a resource id that looks like a bucket.
	run(true, []string{`resource "logins:alice" gets template builtin:default`}, "", "config", "explain", "--resource", "--wait", "0", "--nats", url, "logins:alice")

	// An invalid value stored behind the CLI's back: revision 1 serves.
	js, _ := jetstream.New(natstest.Conn(t, s))
	kv, err := js.KeyValue(testCtx(t), configkv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := kv.Put(testCtx(t), config.NamespaceKey("logins"), []byte(`{"buckets":{"alice":{"size":"ten"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	explain("logins:alice", fmt.Sprintf("namespaces.logins: revision %d is INVALID", bad), "replicas serve revision 1", "revision 1")
	run(true, []string{"namespaces.logins", "INVALID", "revision 1 serves"}, "", "config", "list", "--nats", url)
	run(true, []string{"put (INVALID: buckets.alice.size: want an integer", "revision 1 "}, "", "config", "history", "--nats", url, "namespaces.logins")

	// A running replica reports the revisions it serves.
	startServing(t, s, coordFlags{node: "root", serverID: "replica-q", round: 5 * time.Millisecond, bucket: "allot_state", configBucket: configkv.DefaultBucket, unmatched: config.UnmatchedDefault, logLevel: "warn"})
	ctx := testCtx(t)
	for {
		_, out, _ := runCLI(t, "", "config", "explain", "--wait", "300ms", "--nats", url, "logins:alice")
		if strings.Contains(out, "replica-q (generation") && strings.Contains(out, "namespaces._default@2, namespaces.logins@1") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the replica never reported the namespace revisions:\n%s", out)
		}
	}

	// Template explain still rebuilds a replica's templates when it also
	// reports namespace keys. (Asked until replica-q's reply is among
	// those collected within --wait, as above.)
	for {
		code, out, _ := runCLI(t, "", "config", "explain", "--wait", "300ms", "--nats", url, "mysql/main")
		if code == 0 && strings.Contains(out, "replica-q (generation") && strings.Contains(out, "would use template mysql-main") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("explain mysql/main does not show what replica-q would use:\n%s", out)
		}
	}

	run(true, []string{"deleted namespaces.logins"}, "", "config", "delete", "--nats", url, "namespaces.logins")
	explain("logins:alice", "answered by: global default")
}
