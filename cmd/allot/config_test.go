package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/deploy/templates"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// runCLI runs `allot args...` and returns its exit code and output.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code = run(ctx, env, args)
	return code, out.String(), errb.String()
}

const cliMySQL = `{"identifier_glob":"mysql/main","capacity":500,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`

func TestConfigCLI(t *testing.T) {
	s := natstest.Server(t)
	url := s.ClientURL()
	dir := t.TempDir()
	file := filepath.Join(dir, "mysql-any.yaml")
	if err := os.WriteFile(file, []byte("identifier_glob: \"mysql/*\"\ncapacity: 50\nalgorithm:\n  kind: PROPORTIONAL_SHARE\n  learning_mode_duration: 5m\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	mustRun := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errs := runCLI(t, stdin, args...)
		if code != 0 {
			t.Fatalf("allot %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
		}
		return out + errs
	}
	mustFail := func(want string, stdin string, args ...string) {
		t.Helper()
		code, out, errs := runCLI(t, stdin, args...)
		if code == 0 || !strings.Contains(out+errs, want) {
			t.Fatalf("allot %s: exit %d, want failure mentioning %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
		}
	}

	// Offline validation.
	out := mustRun("", "config", "validate", file)
	if !strings.Contains(out, `"learning_mode_duration": "60s"`) || !strings.Contains(out, "note: algorithm.learning_mode_duration") {
		t.Errorf("validate output:\n%s", out)
	}
	mustFail("capacity: -1 is negative", `{"identifier_glob":"x","capacity":-1}`, "config", "validate", "-")

	// Before anything is stored, read commands explain the missing bucket.
	mustFail(`bucket "allot_config": nats: bucket not found: check --bucket`, "", "config", "list", "--nats", url)
	// put creates no bucket unless asked to.
	mustFail(`bucket "allot_config": nats: bucket not found: check --bucket for a typo`, cliMySQL, "config", "put", "mysql-main", "-", "--nats", url)

	mustRun(cliMySQL, "config", "put", "--create-bucket", "mysql-main", "-", "--nats", url)
	mustFail(`configuration bucket "alot_config": nats: bucket not found`, cliMySQL, "config", "put", "--bucket", "alot_config", "mysql-main", "-", "--nats", url)
	js, _ := jetstream.New(natstest.Conn(t, s))
	if _, err := js.KeyValue(testCtx(t), "alot_config"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("put with a mistyped --bucket created it: %v", err)
	}
	mustRun("", "config", "put", "--nats", url, "mysql-any", file)
	mustFail("refusing invalid template", `{"identifier_glob":"x","capacity":"lots"}`, "config", "put", "bad", "-", "--nats", url)
	mustFail("name", cliMySQL, "config", "put", "bad.name", "-", "--nats", url)
	mustFail("key exists", cliMySQL, "config", "put", "--create-only", "mysql-main", "-", "--nats", url)
	// The refusals of --create-only and --revision say what the key's
	// revision is, not the JetStream API error alone.
	mustFail("templates.mysql-main exists (revision 1): --create-only stores only a key that does not", cliMySQL, "config", "put", "--create-only", "mysql-main", "-", "--nats", url)
	mustFail("templates.mysql-main is at revision 1, not --revision 7: it changed since", cliMySQL, "config", "put", "--revision", "7", "mysql-main", "-", "--nats", url)
	mustFail("templates.nothing does not exist, not at --revision 7", cliMySQL, "config", "put", "--revision", "7", "nothing", "-", "--nats", url)

	if out := mustRun("", "config", "get", "mysql-main", "--nats", url); !strings.Contains(out, cliMySQL) {
		t.Errorf("get:\n%s", out)
	}
	if out := mustRun("", "config", "get", "--normalized", "mysql-main", "--nats", url); !strings.Contains(out, `"learning_mode_duration": "60s"`) {
		t.Errorf("get --normalized:\n%s", out)
	}
	out = mustRun("", "config", "list", "--nats", url)
	if !strings.Contains(out, "mysql-main") || !strings.Contains(out, "mysql/*") {
		t.Errorf("list:\n%s", out)
	}

	out = mustRun("", "config", "explain", "mysql/main", "--nats", url)
	if !strings.Contains(out, `gets template mysql-main`) || strings.Index(out, "mysql-main") > strings.Index(out, "mysql-any") || !strings.Contains(out, "builtin:default") {
		t.Errorf("explain:\n%s", out)
	}
	out = mustRun("", "config", "explain", "--unmatched", "reject", "redis/x", "--nats", url)
	if !strings.Contains(out, "rejected") {
		t.Errorf("explain reject:\n%s", out)
	}

	mustRun(strings.Replace(cliMySQL, "500", "600", 1), "config", "put", "mysql-main", "-", "--nats", url)
	mustRun("", "config", "delete", "mysql-main", "--nats", url)
	mustFail("not found", "", "config", "get", "mysql-main", "--nats", url)
	out = mustRun("", "config", "history", "mysql-main", "--nats", url)
	if strings.Count(out, "revision ") != 3 || !strings.Contains(out, "delete") || !strings.Contains(out, "600") {
		t.Errorf("history:\n%s", out)
	}
	out = mustRun("", "config", "explain", "mysql/main", "--nats", url)
	if !strings.Contains(out, "gets template mysql-any") {
		t.Errorf("explain after delete:\n%s", out)
	}

	mustFail(`unknown command "frobnicate"`, "", "config", "frobnicate")
	mustFail("want 2 argument", "", "config", "put", "x")
}

// startServing runs serve (a replica with the configuration watcher, as
// `allot coordinator` does) on a connection of its own until the test
// ends.
func startServing(t *testing.T, s *server.Server, cf coordFlags) {
	t.Helper()
	nc := natstest.Conn(t, s) // closed after the cleanup below
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, nc, &cf, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve %s: %v", cf.serverID, err)
		}
	})
}

// TestConfigStatusCLI: `allot config status` shows every replica's view,
// the follower's included (it listed only the leader's), and fails when
// nothing answers (it exited 0).
func TestConfigStatusCLI(t *testing.T) {
	s := natstest.Server(t)
	url := s.ClientURL()
	code, out, errs := runCLI(t, "", "config", "status", "--nats", url, "--wait", "200ms")
	if code == 0 || !strings.Contains(out, "no coordinator replica answered") || !strings.Contains(errs, "no coordinator replica answered on "+url) {
		t.Errorf("status without replicas: exit %d\n%s\n%s", code, out, errs)
	}

	code, out, errs = runCLI(t, cliMySQL, "config", "put", "--create-bucket", "mysql-main", "-", "--nats", url)
	if code != 0 {
		t.Fatalf("put: %d %s %s", code, out, errs)
	}
	for _, id := range []string{"replica-a", "replica-b"} {
		startServing(t, s, coordFlags{node: "root", serverID: id, round: 5 * time.Millisecond, bucket: "allot_state", configBucket: configkv.DefaultBucket, unmatched: config.UnmatchedDefault, logLevel: "warn"})
	}
	ctx := testCtx(t)
	js, _ := jetstream.New(natstest.Conn(t, s))
	kv, err := js.KeyValue(ctx, configkv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := kv.Put(ctx, config.Key("mysql-main"), []byte(`{"identifier_glob":"mysql/main","capacity":-5}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"replica replica-a of node root", "replica replica-b of node root", "follower", "leader, serving term",
		fmt.Sprintf("serving revision %d because revision %d is invalid", bad-1, bad),
		fmt.Sprintf("rejected templates.mysql-main revision %d", bad),
	}
	for {
		code, out, errs = runCLI(t, "", "config", "status", "--nats", url, "--wait", "300ms")
		missing := ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
			}
		}
		if code == 0 && missing == "" && strings.Count(out, "generation") == 2 && strings.Count(out, "rejected templates.mysql-main") == 2 {
			t.Logf("allot config status:\n%s", out)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status: exit %d, lacks %q\n%s\n%s", code, missing, out, errs)
		}
	}
	// Each call collects the replies that arrive within 300ms: under
	// -race on a loaded machine one replica's may come later, so ask
	// again rather than read one call as the whole answer.
	for {
		code, out, _ = runCLI(t, "", "config", "status", "--json", "--nats", url, "--wait", "300ms")
		var rs []opstatus.Replica
		err := json.Unmarshal([]byte(out), &rs)
		if code == 0 && err == nil && len(rs) == 2 && rs[0].Config != nil && rs[1].Config != nil && rs[0].Role != rs[1].Role {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status --json: %d %v\n%s", code, err, out)
		}
	}
}

// TestConfigExplainCLI: explain applies the unmatched policy (the flag,
// else what the running replicas report) and says what the running
// replicas would give the resource, from the configuration they report.
func TestConfigExplainCLI(t *testing.T) {
	s := natstest.Server(t)
	url := s.ClientURL()
	if code, out, errs := runCLI(t, cliMySQL, "config", "put", "--create-bucket", "mysql-main", "-", "--nats", url); code != 0 {
		t.Fatalf("put: %d %s %s", code, out, errs)
	}
	// Offline (nothing running): the flag decides.
	// Each call collects what the replicas answer within 300ms: under
	// -race on a loaded machine a reply may come later, so a call that
	// lacks a want is asked again until the test's deadline.
	mustExplain := func(want []string, args ...string) string {
		t.Helper()
		ctx := testCtx(t)
		for {
			code, out, errs := runCLI(t, "", append([]string{"config", "explain", "--nats", url, "--wait", "300ms"}, args...)...)
			missing := ""
			for _, w := range want {
				if !strings.Contains(out, w) {
					missing = w
				}
			}
			if code == 0 && missing == "" {
				t.Logf("allot config explain %s:\n%s", strings.Join(args, " "), out)
				return out
			}
			if ctx.Err() != nil {
				t.Fatalf("explain %v: exit %d, lacks %q\n%s\n%s", args, code, missing, out, errs)
			}
		}
	}
	mustExplain([]string{"Unmatched resources: default (the default policy)", `resource "redis/x" gets template builtin:default`, "none answered"}, "redis/x")
	mustExplain([]string{`resource "redis/x" matches no template and unmatched resources are rejected`}, "--unmatched", "reject", "redis/x")

	// Replicas running with --unmatched reject, and a template that never
	// had a valid revision.
	startServing(t, s, coordFlags{node: "root", serverID: "replica-a", round: 5 * time.Millisecond, bucket: "allot_state", configBucket: configkv.DefaultBucket, unmatched: config.UnmatchedReject, logLevel: "warn"})
	js, _ := jetstream.New(natstest.Conn(t, s))
	kv, err := js.KeyValue(testCtx(t), configkv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), config.Key("cache"), []byte(`{"identifier_glob":"cache/*","capacity":-3}`)); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for {
		_, out, _ := runCLI(t, "", "config", "explain", "--nats", url, "--wait", "300ms", "cache/x")
		if strings.Contains(out, "replica-a (generation") && strings.Contains(out, "would refuse it") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the replica never reported the refusal:\n%s", out)
		}
	}
	mustExplain([]string{"Unmatched resources: reject (the policy the running replicas report)", "matches no template and unmatched resources are rejected", "replica-a (generation", "would reject it"}, "redis/x")
	mustExplain([]string{`gets template builtin:default`, "would reject it"}, "--unmatched", "default", "redis/x")
	mustExplain([]string{"gets template mysql-main (revision 1)", "replica-a (generation", "would use template mysql-main (revision 1): FAIR_SHARE, capacity 500"}, "mysql/main")
	mustExplain([]string{`resource "cache/x" is refused: template cache revision`, "would refuse it", `no valid revision in its history: the resources its glob "cache/*" would serve are refused`}, "cache/x")
	// config list says it in a sentence that reads.
	if code, out, errs := runCLI(t, "", "config", "list", "--nats", url); code != 0 || !strings.Contains(out, `INVALID (the resources its glob "cache/*" would serve are refused): capacity: -3`) {
		t.Errorf("config list: exit %d %s\n%s", code, errs, out)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// askCapacity sends one capacity.get for id to node root and returns the
// capacity granted, or the error code and text.
func askCapacity(t *testing.T, nc *nats.Conn, id string, wants float64) (float64, string) {
	t.Helper()
	req, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: "c1", Resource: []*allotpb.ResourceRequest{{ResourceId: id, Wants: wants}}})
	msg := nats.NewMsg("allot.root.capacity.get")
	msg.Data = req
	msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
	m, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		return -1, err.Error()
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return -1, code + " " + m.Header.Get("Nats-Service-Error")
	}
	var resp allotpb.GetCapacityResponse
	if err := proto.Unmarshal(m.Data, &resp); err != nil {
		return -1, err.Error()
	}
	return resp.GetResponse()[0].GetGets().GetCapacity(), ""
}

// TestCoordinatorStartedAfterBadPut is TestFreshWatcherServesLastValidRevision
// through the real serve path: after a valid put (500) and an invalid one (-1), a
// coordinator that starts fresh grants from the valid revision instead of
// the built-in default (100), and refuses a resource whose template never
// had a valid revision rather than serving it with the default.
func TestCoordinatorStartedAfterBadPut(t *testing.T) {
	s := natstest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(natstest.Conn(t, s))
	kv, err := configkv.OpenBucket(ctx, js, configkv.DefaultBucket, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, kvp := range [][2]string{
		{"lim", `{"identifier_glob":"lim","capacity":500,"algorithm":{"kind":"FAIR_SHARE"}}`},
		{"lim", `{"identifier_glob":"lim","capacity":-1,"algorithm":{"kind":"FAIR_SHARE"}}`},
		{"redis", `{"identifier_glob":"redis/*","capacity":-1,"algorithm":{"kind":"FAIR_SHARE"}}`},
	} {
		if _, err := kv.Put(ctx, config.Key(kvp[0]), []byte(kvp[1])); err != nil {
			t.Fatal(err)
		}
	}
	startServing(t, s, coordFlags{node: "root", round: 5 * time.Millisecond, bucket: "allot_state", configBucket: configkv.DefaultBucket, unmatched: config.UnmatchedDefault, logLevel: "warn"})
	client := natstest.Conn(t, s)
	var got float64
	var e string
	poll.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if got, e = askCapacity(t, client, "lim", 1000); e != "" && !strings.HasPrefix(e, "4") {
			return fmt.Errorf("lim not served yet: %s", e)
		}
		return nil
	})
	if got != 500 {
		t.Errorf("lim: granted %v (%s), want 500 from the last valid revision", got, e)
	}
	if got, e := askCapacity(t, client, "redis/cache", 1000); !strings.HasPrefix(e, "404") || !strings.Contains(e, "is refused") || !strings.Contains(e, "template redis revision") {
		t.Errorf("redis/cache: granted %v (%s), want 404 refused", got, e)
	}
}

// TestShippedPrecedence checks the precedence example of
// docs/configuration.md against the templates `allot up` seeds.
func TestShippedPrecedence(t *testing.T) {
	s := natstest.Server(t)
	ctx := testCtx(t)
	js, _ := jetstream.New(natstest.Conn(t, s))
	kv, err := configkv.OpenBucket(ctx, js, configkv.DefaultBucket, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := configkv.SeedTemplates(ctx, kv, templates.FS()); err != nil {
		t.Fatal(err)
	}
	entries, err := configkv.LoadAll(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	set := configkv.SetFromEntries(entries, config.DefaultTemplate())
	for id, want := range map[string]string{
		"mysql/main":         "mysql-main default builtin:default",
		"mysql/replica-eu-2": "mysql-replicas default builtin:default",
		"batch/nightly":      "batch-static default builtin:default",
	} {
		var got []string
		for _, c := range set.Explain(id) {
			got = append(got, c.Template.Name)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%s: candidates %v, want %s", id, got, want)
		}
	}
}
