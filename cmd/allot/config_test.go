package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
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
	mustFail("no template was ever stored", "", "config", "list", "--nats", url)

	mustRun(cliMySQL, "config", "put", "mysql-main", "-", "--nats", url)
	mustRun("", "config", "put", "--nats", url, "mysql-any", file)
	mustFail("refusing invalid template", `{"identifier_glob":"x","capacity":"lots"}`, "config", "put", "bad", "-", "--nats", url)
	mustFail("name", cliMySQL, "config", "put", "bad.name", "-", "--nats", url)
	mustFail("key exists", cliMySQL, "config", "put", "--create-only", "mysql-main", "-", "--nats", url)

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

	mustFail("unknown subcommand", "", "config", "frobnicate")
	mustFail("want 2 argument", "", "config", "put", "x")
}

func TestConfigStatusCLI(t *testing.T) {
	s := natstest.Server(t)
	url := s.ClientURL()
	code, out, _ := runCLI(t, "", "config", "status", "--nats", url, "--wait", "200ms")
	if code != 0 || !strings.Contains(out, "no coordinators answered") {
		t.Errorf("status without coordinators: %d %s", code, out)
	}
	st := config.Status{Bucket: config.DefaultBucket, Generation: 3, Unmatched: config.UnmatchedDefault, Fallback: "builtin:default",
		Keys: []config.KeyStatus{{Key: "templates.mysql-main", Name: "mysql-main", Revision: 4, Glob: "mysql/main",
			Rejected: []config.Rejection{{Revision: 5, Error: "capacity: -5 is negative", Time: time.Now()}}}}}
	svcConn := natstest.Conn(t, s)
	svc, err := micro.AddService(svcConn, micro.Config{
		Name: config.ServiceName, Version: "0.1.0",
		StatsHandler: func(*micro.Endpoint) any {
			return map[string]any{"node": "root", "server_id": "host:1", "config": st}
		},
		Endpoint: &micro.EndpointConfig{Subject: "allot.test", Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(nil) })},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	// The CLI asks from another connection: make sure the service's
	// subscriptions have reached the server first.
	if err := svcConn.Flush(); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "config", "status", "--nats", url, "--wait", "500ms")
	if code != 0 || !strings.Contains(out, "coordinator root server host:1") || !strings.Contains(out, "rejected templates.mysql-main revision 5") {
		t.Errorf("status: %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = runCLI(t, "", "config", "status", "--json", "--nats", url, "--wait", "500ms")
	if code != 0 || !strings.Contains(out, `"node": "root"`) {
		t.Errorf("status --json: %d\n%s", code, out)
	}
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

// TestCoordinatorStartedAfterBadPut is issue 9 item 4 through the real
// serve path: after a valid put (500) and an invalid one (-1), a
// coordinator that starts fresh grants from the valid revision instead of
// the built-in default (100), and refuses a resource whose template never
// had a valid revision rather than serving it with the default.
func TestCoordinatorStartedAfterBadPut(t *testing.T) {
	s := natstest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(natstest.Conn(t, s))
	kv, err := config.OpenBucket(ctx, js, config.DefaultBucket, true)
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
	cf := coordFlags{node: "root", round: 5 * time.Millisecond, bucket: "allot_state", configBucket: config.DefaultBucket, unmatched: config.UnmatchedDefault, logLevel: "warn"}
	serveCtx, stopServe := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serve(serveCtx, natstest.Conn(t, s), &cf, slog.New(slog.DiscardHandler)) }()
	defer func() {
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	client := natstest.Conn(t, s)
	got, e := askCapacity(t, client, "lim", 1000)
	for e != "" && !strings.HasPrefix(e, "4") && ctx.Err() == nil { // not serving yet
		time.Sleep(20 * time.Millisecond)
		got, e = askCapacity(t, client, "lim", 1000)
	}
	if got != 500 {
		t.Errorf("lim: granted %v (%s), want 500 from the last valid revision", got, e)
	}
	if got, e := askCapacity(t, client, "redis/cache", 1000); !strings.HasPrefix(e, "404") || !strings.Contains(e, "is refused") || !strings.Contains(e, "template redis revision") {
		t.Errorf("redis/cache: granted %v (%s), want 404 refused", got, e)
	}
}
