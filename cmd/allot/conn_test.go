package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, generated for one test.
type testPKI struct {
	caFile, certFile, keyFile string
	server                    *tls.Config
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, caKey, caPEM, _ := newCert(t, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "allot test CA"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	_, _, srvCert, srvKey := newCert(t, &x509.Certificate{
		SerialNumber: big.NewInt(2), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}, ca, caKey)
	_, _, cliCert, cliKey := newCert(t, &x509.Certificate{
		SerialNumber: big.NewInt(3), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p := &testPKI{
		caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client-key.pem"),
		server: &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
	}
	for file, data := range map[string][]byte{p.caFile: caPEM, p.certFile: cliCert, p.keyFile: cliKey} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// newCert makes a key and a certificate from tmpl valid for an hour,
// signed by parent (self-signed if parent is nil).
func newCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	if tmpl.Subject.CommonName == "" {
		tmpl.Subject.CommonName = "allot test"
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// runCtx runs one allot command and returns its exit code and output.
func runCtx(ctx context.Context, args ...string) (int, string) {
	var out syncBuffer
	code := run(ctx, testEnv(&out), args)
	return code, out.String()
}

// startCoordinator runs `allot coordinator` with args until the test ends
// and waits until `allot get` with getArgs is answered. The function it
// returns stops the coordinator and returns its output (warnings and
// errors). It elects with a 3s TTL, the default: with 1s, a leader on a
// heavily loaded machine lapsed mid-test and its node had no responder.
func startCoordinator(t *testing.T, args, getArgs []string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		code, out := runCtx(ctx, append([]string{"coordinator", "--log-level", "warn", "--election-ttl", "3s"}, args...)...)
		if code != 0 {
			out = "coordinator exited " + out
		}
		done <- out
	}()
	var once sync.Once
	var output string
	stop := func() string {
		once.Do(func() {
			cancel()
			if output = <-done; strings.HasPrefix(output, "coordinator exited") {
				t.Error(output)
			}
		})
		return output
	}
	t.Cleanup(func() { stop() })
	var last string
	// A minute: a level's configuration mirror catches up with its
	// parent's over the leaf link, which at load 15 took over 30s.
	if !poll.Ok(time.Minute, func() bool {
		code, out := runCtx(context.Background(), append([]string{"get", "db", "--wants", "1", "--client", "probe", "--timeout", "1s"}, getArgs...)...)
		if code == 0 {
			return true
		}
		last = out
		select {
		case out := <-done:
			done <- out // for the cleanup
			t.Fatalf("coordinator stopped: %s", out)
		default:
		}
		return false
	}) {
		t.Fatalf("no coordinator answers within a minute; last get: %s; coordinator: %s", last, stop())
	}
	return stop
}

// TestConnFlagsTLS runs every connecting command against a server that
// requires TLS with client certificates: with --tls-ca, --tls-cert and
// --tls-key they work; without them, or with a bad CA file, they fail
// with an error that says why.
func TestConnFlagsTLS(t *testing.T) {
	pki := newTestPKI(t)
	s, err := embed.Start(embed.Options{StoreDir: t.TempDir(), TLS: pki.server})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	tlsArgs := []string{"--nats", s.ClientURL(), "--tls-ca", pki.caFile, "--tls-cert", pki.certFile, "--tls-key", pki.keyFile}
	startCoordinator(t, tlsArgs, tlsArgs)
	runConnecting(t, tlsArgs...)
	ctx := context.Background()

	badCA := filepath.Join(t.TempDir(), "bad-ca.pem")
	if err := os.WriteFile(badCA, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats", s.ClientURL()}, "--tls-ca names the CA"},
		{[]string{"--nats", s.ClientURL(), "--tls-ca", pki.caFile}, "give --tls-cert and --tls-key"},
		{[]string{"--nats", s.ClientURL(), "--tls-ca", badCA}, "--tls-ca " + badCA + ": no PEM certificate"},
		{[]string{"--nats", s.ClientURL(), "--tls-ca", badCA + ".missing"}, "--tls-ca: open"},
		{[]string{"--nats", s.ClientURL(), "--tls-ca", pki.caFile, "--tls-cert", pki.certFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--nats", s.ClientURL(), "--creds", badCA + ".missing"}, "--creds: "},
	} {
		for _, cmd := range [][]string{{"get", "db", "--client", "c2"}, {"status"}, {"config", "list"}} {
			code, out := runCtx(ctx, append(cmd, c.args...)...)
			if code == 0 || !strings.Contains(out, c.want) {
				t.Errorf("allot %v %v: exit %d, %q; want an error with %q", cmd, c.args, code, out, c.want)
			}
		}
	}
}

// TestNATSURLEnv: without --nats, every connecting command uses $NATS_URL.
func TestNATSURLEnv(t *testing.T) {
	s := natstest.Server(t)
	t.Setenv("NATS_URL", s.ClientURL())
	startCoordinator(t, nil, nil)
	runConnecting(t)
}

// TestInboxPrefix: --inbox-prefix moves the replies a command waits for
// onto the given prefix.
func TestInboxPrefix(t *testing.T) {
	s := natstest.Server(t)
	url := []string{"--nats", s.ClientURL()}
	startCoordinator(t, url, url)
	watcher := natstest.Conn(t, s)
	sub, err := watcher.SubscribeSync("_ALLOT_TEST.>")
	if err != nil {
		t.Fatal(err)
	}
	// The replies go out on the commands' own connections: the watcher's
	// subscription must be at the server before they do.
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	runConnecting(t, "--nats", s.ClientURL(), "--inbox-prefix", "_ALLOT_TEST")
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no reply under _ALLOT_TEST.>: %v", err)
	}
	if code, out := runCtx(context.Background(), "status", "--nats", s.ClientURL(), "--inbox-prefix", "bad.*"); code == 0 || !strings.Contains(out, "prefix") {
		t.Errorf("--inbox-prefix with a wildcard: exit %d, %s", code, out)
	}
}

// runConnecting runs every command that connects, with args added, and
// expects each to succeed.
func runConnecting(t *testing.T, args ...string) {
	t.Helper()
	for _, cmd := range [][]string{
		{"get", "db", "--wants", "5", "--client", "c1"},
		{"release", "db", "--client", "c1"},
		{"status"},
		{"config", "list"},
		{"config", "status"},
	} {
		if code, out := runCtx(context.Background(), append(cmd, args...)...); code != 0 {
			t.Errorf("allot %v %v: exit %d: %s", cmd, args, code, out)
		}
	}
}
