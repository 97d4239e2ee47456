package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/secureinit"
)

// TestSecureLevel: the commands docs/security.md gives for a child level
// with its own coordinators. Under a root started from root.conf with
// its `allot coordinator`, after the root's admin created the level's
// mirror consumer, `allot coordinator --node region1 --parent-node root`
// runs with region1's seed and inbox prefix against level.conf, a
// tenant's `allot get --node region1` there is answered, the level's
// admin sees its level with `allot status`, and neither coordinator
// (with its quota and domain services) is refused anything.
func TestSecureLevel(t *testing.T) {
	set, err := secureinit.Init(filepath.Join(t.TempDir(), "sec"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	env := maps.Clone(set.Env)
	env["CLIENT_PORT"], env["LEAF_PORT"], env["HTTP_LISTEN"], env["STORE_DIR"] = "-1", "-1", "127.0.0.1:-1", t.TempDir()
	root := natstest.ConfigServer(t, "../../deploy/nats/secure/root.conf", env, nil)
	v, err := root.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	env["SERVER_NAME"], env["STORE_DIR"] = "allot-region1", t.TempDir()
	env["PARENT_LEAF_URLS"] = fmt.Sprintf("[tls://127.0.0.1:%d]", v.LeafNode.Port)
	level := natstest.ConfigServer(t, "../../deploy/nats/secure/level.conf", env, nil)
	url := func(s interface{ Addr() net.Addr }) string {
		return fmt.Sprintf("tls://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port)
	}
	rootURL, levelURL := url(root), url(level)
	conn := func(url, user string) []string {
		args := []string{"--nats", url, "--tls-ca", set.Certs.CA, "--nkey", set.Seed(user)}
		if p := secureinit.InboxPrefix(user); p != "" {
			args = append(args, "--inbox-prefix", p)
		}
		return args
	}
	ctx := context.Background()
	tmpl := filepath.Join(t.TempDir(), "db.json")
	if err := os.WriteFile(tmpl, []byte(`{"identifier_glob": "db", "capacity": 100}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := runCtx(ctx, append([]string{"config", "put", "--create-bucket", "db", tmpl}, conn(rootURL, "admin")...)...); code != 0 {
		t.Fatalf("admin config put: exit %d: %s", code, out)
	}
	createMirrorConsumer(t, rootURL, set)
	// As secure init prints them: unmatched resources refused.
	stopRoot := startCoordinator(t, append(conn(rootURL, "coordinator"), "--unmatched", "reject"), conn(rootURL, "tenant_a"))
	stopLevel := startCoordinator(t, append(conn(levelURL, "region1_coordinator"), "--node", "region1", "--parent-node", "root", "--unmatched", "reject"),
		append(conn(levelURL, "tenant_a"), "--node", "region1"))
	if code, o := runCtx(ctx, append([]string{"get", "db", "--wants", "10", "--node", "region1"}, conn(levelURL, "tenant_b")...)...); code != 0 || !strings.Contains(o, "10") {
		t.Fatalf("tenant_b get at region1: exit %d: %s", code, o)
	}
	// Discovery does not cross the link: each level's admin sees its own.
	statusUntil(t, func(code int, o string) string {
		if code != 0 || !strings.Contains(o, "region1 (under root)") {
			return fmt.Sprintf("region1_admin status: exit %d: %s", code, o)
		}
		return ""
	}, conn(levelURL, "region1_admin")...)
	for name, stop := range map[string]func() string{"root": stopRoot, "region1": stopLevel} {
		if out := stop(); strings.Contains(out, "refused a permission") {
			t.Errorf("the %s coordinator was refused:\n%s", name, out)
		}
	}
}

// createMirrorConsumer creates, as the root's admin, the durable consumer
// region1's configuration mirror sources through.
func createMirrorConsumer(t *testing.T, url string, set *secureinit.Setup) {
	t.Helper()
	nkey, err := nats.NkeyOptionFromSeed(set.Seed("admin"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nkey, nats.RootCAs(set.Certs.CA))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdatePushConsumer(ctx, "KV_"+configkv.DefaultBucket, configkv.MirrorConsumer("", "region1")); err != nil {
		t.Fatal(err)
	}
}
