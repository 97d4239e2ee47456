package secure_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/allot/allot/internal/poll"
)

// startChild starts a child server from leaf.conf joined to d's root
// over the tenants' leaf links, and waits for both links.
func (d *deployment) startChild(t *testing.T) *server.Server {
	t.Helper()
	env := map[string]string{}
	for k, v := range d.set.Env {
		env[k] = v
	}
	env["SERVER_NAME"], env["CLIENT_PORT"], env["HTTP_LISTEN"] = "allot-child", "-1", "127.0.0.1:-1"
	env["PARENT_LEAF_URLS"] = "[" + d.leafURL + "]"
	child, _ := startConfig(t, "leaf.conf", env)
	poll.For(t, wait, poll.Interval, func() error {
		if c, r := child.NumLeafNodes(), d.srv.NumLeafNodes(); c < 2 || r < 2 {
			return fmt.Errorf("leaf links: child %d, root %d", c, r)
		}
		return nil
	})
	return child
}

// TestLeafTenantAgentsGetTheirLeases: tenants connected to a child
// server reach the root's coordinator through their accounts' leaf links
// and get their leases as they would at the root.
func TestLeafTenantAgentsGetTheirLeases(t *testing.T) {
	d := startDeployment(t)
	child := d.startChild(t)
	for _, user := range []string{"tenant_a", "tenant_b"} {
		nc, errs := d.dial(t, child, user)
		leaseOf(t, nc)
		if e := errs.all(); len(e) > 0 {
			t.Fatalf("%s was refused: %v", user, e)
		}
	}
}

// TestLeafAttacksRefused: the attacks of the root suite, from a tenant
// connected to a child server, are refused there: no coordinator
// subject, no other inbox, no bucket, no JetStream or system subject, no
// other tenant's subject; a tenant at the child whose agent holds a lease
// keeps it and its term.
func TestLeafAttacksRefused(t *testing.T) {
	d := startDeployment(t)
	child := d.startChild(t)
	d.attack(t, child,
		[]string{"allot.root.capacity.get", "allot.t.*.root.capacity.get", "allot.>", "_INBOX.>", "_INBOX_tenant_b.>", "_R_.>", "$JS.>", "$KV.>", "$SYS.>", ">"},
		[]string{"_INBOX_tenant_b.forged", "_R_.forged", "$KV.allot_election.root", "$KV.allot_state.root.leases", "$KV.allot_config.templates.a",
			"$JS.API.INFO", "$JS.API.STREAM.INFO.KV_allot_config", "$SYS.REQ.SERVER.PING", "allot.t.TENANT_B.root.capacity.release"})
}

// TestLeafLinkEnforcedAtRoot: a hostile child, which does not apply the
// permissions the root sends it, speaks the leaf-node protocol with
// TENANT_A's link credentials and sends a forged reply to a TENANT_A
// client of the root. nats-server >= 2.14.0 checks every inbound leaf
// message against the link user's permissions: the root refuses it,
// logs the violation, drops the link, and the victim receives nothing.
// (Servers before 2.14.0, 2.12.7, 2.11.16 did not check inbound leaf
// messages: see TestServerVersionEnforcesLeafPermissions.)
func TestLeafLinkEnforcedAtRoot(t *testing.T) {
	d := startDeployment(t)
	victim, _ := d.dial(t, d.srv, "tenant_a")
	sub, err := victim.SubscribeSync("_INBOX_tenant_a.victim.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.Flush(); err != nil {
		t.Fatal(err)
	}
	leaf := dialLeaf(t, d, "tenant_a_leaf")
	const forged = "_INBOX_tenant_a.victim.1"
	reply := forgedReply(t)
	leaf.send(t, fmt.Sprintf("LMSG %s %d\r\n%s\r\nPING\r\n", forged, len(reply), reply))
	if line := leaf.readUntil(t, "-ERR", "PONG"); !strings.Contains(line, "Permissions Violation for Publish to \""+forged+"\"") {
		t.Fatalf("the root answered the forged message with %q", line)
	}
	d.log.waitFor(t, "Publish Violation on \""+forged+"\"")
	if m, err := sub.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("the victim received the forged message: %q", m.Data)
	}
}

// rawLeaf is a leaf-node connection spoken by hand.
type rawLeaf struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialLeaf connects to d's root leaf-node port over TLS and
// authenticates with user's nkey seed.
func dialLeaf(t *testing.T, d *deployment, user string) *rawLeaf {
	t.Helper()
	addr := strings.TrimPrefix(d.leafURL, "tls://")
	conn, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(wait))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("leaf INFO: %q %v", line, err)
	}
	var info struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), "INFO ")), &info); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(d.set.Certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(d.set.Certs.ServerCert, d.set.Certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(d.set.Seed(user))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	sig, err := kp.Sign([]byte(info.Nonce))
	if err != nil {
		t.Fatal(err)
	}
	connect, _ := json.Marshal(map[string]any{"nkey": pub, "sig": base64.RawURLEncoding.EncodeToString(sig),
		"name": "hostile-child", "server_id": "NHOSTILECHILD", "headers": true, "protocol": 1})
	l := &rawLeaf{conn: tc, r: bufio.NewReader(tc)}
	l.send(t, "CONNECT "+string(connect)+"\r\nPING\r\n")
	l.readUntil(t, "PONG")
	return l
}

func (l *rawLeaf) send(t *testing.T, s string) {
	t.Helper()
	if _, err := l.conn.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// readUntil reads lines, answering PINGs, until one starts with one of
// prefixes, and returns it.
func (l *rawLeaf) readUntil(t *testing.T, prefixes ...string) string {
	t.Helper()
	for {
		line, err := l.r.ReadString('\n')
		if err != nil {
			t.Fatalf("leaf connection: %v (waiting for %q)", err, prefixes)
		}
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				return strings.TrimSpace(line)
			}
		}
		if strings.HasPrefix(line, "PING") {
			l.send(t, "PONG\r\n")
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatalf("leaf connection refused: %s", line)
		}
	}
}
