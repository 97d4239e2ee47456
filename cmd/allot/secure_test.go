package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/secureinit"
)

// TestSecureInit: `allot secure init` writes credentials that start the
// shipped secure configuration, with which the operator stores a
// template, `allot coordinator` serves and a tenant's `allot get` is
// answered, all with --nkey, --tls-ca and --inbox-prefix; the
// coordinator's credentials cannot store a template. It refuses to
// overwrite credentials.
func TestSecureInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sec")
	ctx := context.Background()
	code, out := runCtx(ctx, "secure", "init", "--dir", dir, "--host", "allot.example, 10.0.0.1")
	if code != 0 {
		t.Fatalf("secure init: exit %d: %s", code, out)
	}
	for _, want := range []string{"nats-server -c deploy/nats/secure/root.conf", "--nkey " + filepath.Join(dir, "nkeys", "coordinator.nk"), "--inbox-prefix _INBOX_tenant_a", "deploy/nats/secure/level.conf", "--inbox-prefix _INBOX_allot_region1"} {
		if !strings.Contains(out, want) {
			t.Errorf("secure init output lacks %q:\n%s", want, out)
		}
	}
	if code, out := runCtx(ctx, "secure", "init", "--dir", dir); code == 0 || !strings.Contains(out, "already holds credentials") {
		t.Errorf("second init: exit %d: %s", code, out)
	}
	for _, args := range [][]string{{"secure"}, {"secure", "init"}, {"secure", "init", "--dir", t.TempDir(), "--valid", "0s"}, {"secure", "nope"}} {
		if code, out := runCtx(ctx, args...); code == 0 {
			t.Errorf("allot %v: exit 0: %s", args, out)
		}
	}

	env := readEnvFile(t, filepath.Join(dir, secureinit.EnvFile))
	env["CLIENT_PORT"], env["LEAF_PORT"], env["HTTP_LISTEN"], env["STORE_DIR"] = "-1", "-1", "127.0.0.1:-1", t.TempDir()
	srv := natstest.ConfigServer(t, "../../deploy/nats/secure/root.conf", env, nil)
	url := fmt.Sprintf("tls://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port)
	conn := func(user string) []string {
		args := []string{"--nats", url, "--tls-ca", filepath.Join(dir, "tls", "ca.pem"), "--nkey", filepath.Join(dir, "nkeys", user+".nk")}
		if p := secureinit.InboxPrefix(user); p != "" {
			args = append(args, "--inbox-prefix", p)
		}
		return args
	}
	tmpl := filepath.Join(t.TempDir(), "db.json")
	if err := os.WriteFile(tmpl, []byte(`{"identifier_glob": "db", "capacity": 100}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := runCtx(ctx, append([]string{"config", "put", "--create-bucket", "db", tmpl}, conn("admin")...)...); code != 0 {
		t.Fatalf("admin config put: exit %d: %s", code, out)
	}
	if code, out := runCtx(ctx, append([]string{"config", "put", "--timeout", "1s", "db", tmpl}, conn("coordinator")...)...); code == 0 {
		t.Fatalf("the coordinator's credentials stored a template: %s", out)
	}
	// The coordinator (with its quota service) runs as secure init says,
	// on the coordinator user's rights alone: its log shows no refused
	// permission.
	coordArgs := printedCommand(t, out, "allot coordinator ", url)
	if !strings.Contains(strings.Join(coordArgs, " "), "--unmatched reject") {
		t.Errorf("the printed coordinator command does not refuse unmatched resources: %q", coordArgs)
	}
	cctx, cancel := context.WithCancel(ctx)
	coordOut := make(chan string, 1)
	go func() {
		_, out := runCtx(cctx, append(coordArgs, "--log-level", "info", "--election-ttl", "1s")...)
		coordOut <- out
	}()
	defer func() {
		cancel()
		<-coordOut
	}()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if code, o := runCtx(ctx, append([]string{"get", "db", "--wants", "10", "--timeout", "1s"}, conn("tenant_a")...)...); code == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("tenant_a get: exit %d: %s", code, o)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The coordinator's verdict on the template, written with its rights,
	// as the operator reads it.
	admin := connFlags{url: url, nkey: filepath.Join(dir, "nkeys", "admin.nk"), tlsCA: filepath.Join(dir, "tls", "ca.pem")}
	anc, err := admin.dial("test admin")
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	ajs, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	faults.WaitFor(t, 20*time.Second, "the coordinator's verdict on templates.db", func() bool {
		kv, err := ajs.KeyValue(ctx, "allot_state")
		if err != nil {
			return false
		}
		e, err := kv.Get(ctx, configkv.StatusKey("root", "templates.db"))
		return err == nil && strings.Contains(string(e.Value()), `"ok":true`)
	})
	if code, o := runCtx(ctx, append([]string{"get", "db", "--wants", "10"}, conn("tenant_b")...)...); code != 0 || !strings.Contains(o, "10") {
		t.Fatalf("tenant_b get: exit %d: %s", code, o)
	}
	// A resource no template names is refused: a tenant cannot make the
	// node keep state for ids it makes up.
	if code, o := runCtx(ctx, append([]string{"get", "made-up/1", "--wants", "10"}, conn("tenant_b")...)...); code == 0 || !strings.Contains(o, "404") {
		t.Fatalf("tenant_b get of an unmatched resource: exit %d: %s", code, o)
	}
	statusUntil(t, func(code int, o string) string {
		if code != 0 {
			return fmt.Sprintf("admin status: exit %d: %s", code, o)
		}
		return ""
	}, conn("admin")...)
	time.Sleep(1500 * time.Millisecond) // leadership renewals
	cancel()
	out = <-coordOut
	coordOut <- out // for the deferred wait
	if strings.Contains(out, "refused a permission") || strings.Contains(out, "cannot write configuration verdicts") || !strings.Contains(out, "coordinator serving") {
		t.Fatalf("coordinator log:\n%s", out)
	}
}

// printedCommand returns the arguments of the command line in out that
// starts with prefix (such as "allot coordinator "), without "allot" and
// with its --nats URL replaced by url.
func printedCommand(t *testing.T, out, prefix, url string) []string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		args := strings.Fields(line)[1:]
		for i := range args {
			if args[i] == "--nats" && i+1 < len(args) {
				args[i+1] = url
			}
		}
		return args
	}
	t.Fatalf("no line %q in:\n%s", prefix, out)
	return nil
}

// readEnvFile reads the NAME='value' lines of an env file.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.SplitSeq(string(data), "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		env[name] = strings.Trim(value, "'")
	}
	if len(env) < 10 {
		t.Fatalf("%s: only %d variables", path, len(env))
	}
	return env
}

// TestConnFlagsUserPassword: --user/--password and a URL's
// user:password@ authenticate the coordinator and a tenant's client
// (natstest.TenantServer's users); ambiguous or incomplete credentials
// are refused before connecting, a wrong password says so, and no error
// shows a password.
func TestConnFlagsUserPassword(t *testing.T) {
	s := natstest.TenantServer(t, map[string][]string{"TENANT_A": {"a1"}})
	url := s.ClientURL()
	withUser := strings.Replace(url, "nats://", "nats://a1:a1@", 1)
	startCoordinator(t, []string{"--nats", url, "--user", "allot", "--password", "allot"}, []string{"--nats", withUser})
	ctx := context.Background()
	seed := filepath.Join(t.TempDir(), "x.nk")
	if err := os.WriteFile(seed, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats", url, "--password", "secret"}, "--password needs --user"},
		{[]string{"--nats", url, "--user", "a1", "--password", "a1", "--nkey", seed}, "give one way to authenticate"},
		{[]string{"--nats", withUser, "--user", "a1", "--password", "a1"}, "give one way to authenticate"},
		{[]string{"--nats", url, "--nkey", seed}, "--nkey " + seed},
		{[]string{"--nats", url, "--nkey", seed + ".missing"}, "--nkey " + seed + ".missing"},
		{[]string{"--nats", strings.Replace(url, "nats://", "nats://a1:wrongpass@", 1)}, "the server knows no user with these credentials"},
		{[]string{"--nats", url, "--user", "a1", "--password", "wrongpass"}, "the server knows no user with these credentials"},
	} {
		code, out := runCtx(ctx, append([]string{"get", "db", "--client", "c2", "--timeout", "1s"}, c.args...)...)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("allot get %v: exit %d, %q; want an error with %q", c.args, code, out, c.want)
		}
		if strings.Contains(out, "wrongpass") {
			t.Errorf("allot get %v shows the password: %q", c.args, out)
		}
	}
}
