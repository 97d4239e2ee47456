package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
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
	for _, want := range []string{`"$(go env GOPATH)/bin/nats-server" -c deploy/nats/secure/root.conf`, "--nkey " + filepath.Join(dir, "nkeys", "coordinator.nk"),
		"--inbox-prefix _INBOX_tenant_a", "deploy/nats/secure/level.conf", "--inbox-prefix _INBOX_allot_region1",
		"go install github.com/nats-io/nats-server/v2@" + goModVersion(t, "github.com/nats-io/nats-server/v2") + "\n",
		"go run ./cmd/allot config put --create-bucket --nats tls://127.0.0.1:4222 "} {
		if !strings.Contains(out, want) {
			t.Errorf("secure init output lacks %q:\n%s", want, out)
		}
	}
	if code, out := runCtx(ctx, "secure", "init", "--dir", dir); code == 0 || !strings.Contains(out, "already holds credentials") {
		t.Errorf("second init: exit %d: %s", code, out)
	}
	for _, args := range [][]string{{"secure"}, {"secure", "init"}, {"secure", "init", "--dir", t.TempDir(), "--valid", "0s"}, {"secure", "nope"},
		{"secure", "init", "--dir", t.TempDir(), "--client-port", "0"}, {"secure", "init", "--dir", t.TempDir(), "--leaf-port", "4222"},
		{"secure", "init", "--dir", t.TempDir(), "--http-listen", "8222"}, {"secure", "init", "--dir", t.TempDir(), "--http-listen", "127.0.0.1:70000"}} {
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
	coordArgs := printedCommand(t, out, "go run ./cmd/allot coordinator ", url)
	if !strings.Contains(strings.Join(coordArgs, " "), "--unmatched reject") {
		t.Errorf("the printed coordinator command does not refuse unmatched resources: %q", coordArgs)
	}
	cctx, cancel := context.WithCancel(ctx)
	coordOut := make(chan string, 1)
	go func() {
		_, out := runCtx(cctx, append(coordArgs, "--log-level", "info", "--election-ttl", "3s")...)
		coordOut <- out
	}()
	defer func() {
		cancel()
		<-coordOut
	}()
	poll.For(t, 20*time.Second, 100*time.Millisecond, func() error {
		if code, o := runCtx(ctx, append([]string{"get", "db", "--wants", "10", "--timeout", "1s"}, conn("tenant_a")...)...); code != 0 {
			return fmt.Errorf("tenant_a get: exit %d: %s", code, o)
		}
		return nil
	})
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
	poll.Until(t, 20*time.Second, "the coordinator's verdict on templates.db", func() bool {
		kv, err := ajs.KeyValue(ctx, "allot_state")
		if err != nil {
			return false
		}
		e, err := kv.Get(ctx, configkv.StatusKey("root", "templates.db"))
		return err == nil && strings.Contains(string(e.Value()), `"ok":true`)
	})
	// A tenant that leaves out its --inbox-prefix is told so at once, not
	// after a time-out.
	noPrefix := slices.DeleteFunc(conn("tenant_a"), func(a string) bool { return strings.HasPrefix(a, "--inbox-prefix") || strings.HasPrefix(a, "_INBOX_") })
	if code, o := runCtx(ctx, append([]string{"get", "db", "--wants", "10", "--timeout", "1m"}, noPrefix...)...); code == 0 ||
		!strings.Contains(o, "refused this user's subscription to its replies") || !strings.Contains(o, "run again with --inbox-prefix") {
		t.Errorf("tenant_a get without --inbox-prefix: exit %d: %s", code, o)
	}
	if code, o := runCtx(ctx, append([]string{"get", "db", "--wants", "10", "--timeout", "1m", "--inbox-prefix", "_INBOX_tenant_b"}, noPrefix...)...); code == 0 ||
		!strings.Contains(o, "--inbox-prefix _INBOX_tenant_b is not a prefix this user may receive replies under") {
		t.Errorf("tenant_a get with tenant_b's --inbox-prefix: exit %d: %s", code, o)
	}
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
	// The coordinator renews its leadership on its own rights: wait for
	// two renewals of its election key (each a new revision) before
	// reading its log.
	ekv, err := ajs.KeyValue(ctx, "allot_election")
	if err != nil {
		t.Fatal(err)
	}
	first, err := ekv.Get(ctx, "root")
	if err != nil {
		t.Fatal(err)
	}
	poll.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		e, err := ekv.Get(ctx, "root")
		if err != nil || e.Revision() < first.Revision()+2 {
			return fmt.Errorf("election key root not renewed twice since revision %d: %v %v", first.Revision(), e, err)
		}
		return nil
	})
	cancel()
	out = <-coordOut
	coordOut <- out // for the deferred wait
	if strings.Contains(out, "refused a permission") || strings.Contains(out, "cannot write configuration verdicts") || !strings.Contains(out, "coordinator serving") {
		t.Fatalf("coordinator log:\n%s", out)
	}
}

// printedCommand returns the arguments of the command line in out that
// starts with prefix (such as "go run ./cmd/allot coordinator "), without
// the command that runs allot, and with its --nats URL replaced by url.
func printedCommand(t *testing.T, out, prefix, url string) []string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		args := strings.Fields(strings.TrimPrefix(line, "go run ./cmd/allot "))
		if !strings.HasPrefix(line, "go run ./cmd/allot ") {
			args = args[1:] // "allot"
		}
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

// goModVersion returns the version of module path that go.mod requires.
func goModVersion(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(path) + ` (v\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("go.mod requires no %s", path)
	}
	return string(m[1])
}

// TestSecureInitPorts: the ports of the root server are flags, which the
// env file and the printed commands follow; the development CA's key is
// written nowhere, as docs/security.md says.
func TestSecureInitPorts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sec")
	code, out := runCtx(context.Background(), "secure", "init", "--dir", dir, "--client-port", "5222", "--leaf-port", "5422", "--http-listen", "127.0.0.1:5822")
	if code != 0 {
		t.Fatalf("secure init: exit %d: %s", code, out)
	}
	env := readEnvFile(t, filepath.Join(dir, secureinit.EnvFile))
	for k, want := range map[string]string{"CLIENT_PORT": "5222", "LEAF_PORT": "5422", "HTTP_LISTEN": "127.0.0.1:5822", "PARENT_LEAF_URLS": "[tls://127.0.0.1:5422]"} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	if !strings.Contains(out, "--nats tls://127.0.0.1:5222 ") || strings.Contains(out, "4222") {
		t.Errorf("printed commands do not use the client port 5222:\n%s", out)
	}
	docHas(t, "docs/security.md", "--client-port", "--leaf-port", "--http-listen",
		"go install github.com/nats-io/nats-server/v2@"+goModVersion(t, "github.com/nats-io/nats-server/v2"))

	// No file holds the CA's private key.
	caPEM, err := os.ReadFile(filepath.Join(dir, "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		t.Fatalf("CA key %T", ca.PublicKey)
	}
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for b, rest := pem.Decode(data); b != nil; b, rest = pem.Decode(rest) {
			if !strings.Contains(b.Type, "PRIVATE KEY") {
				continue
			}
			var key crypto.Signer
			if ec, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
				key = ec
			} else if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
				key, _ = k.(crypto.Signer)
			}
			if key == nil {
				return fmt.Errorf("%s: a private key that does not parse", path)
			}
			if caKey.Equal(key.Public()) {
				return fmt.Errorf("%s holds the CA's private key", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
