package secure_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/allot/allot/internal/devcerts"
)

// copyConfigs copies the shipped files to a temporary directory, where a
// test can edit them as an operator would before a reload.
func copyConfigs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("*.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, f), data)
	}
	return dir
}

// TestRotateNkeyByReload follows docs/security.md: add the user's new
// key beside the old, reload, move the client, remove the old key,
// reload. The old connection is closed at the second reload and the old
// seed refused; the new one works throughout.
func TestRotateNkeyByReload(t *testing.T) {
	d := &deployment{set: newSetup(t)}
	dir := copyConfigs(t)
	conf := filepath.Join(dir, "accounts.conf")
	d.srv, d.log = startConfig(t, filepath.Join(dir, "root.conf"), rootEnv(t, d.set, false))
	old, _ := d.dial(t, d.srv, "tenant_a")
	dropped := make(chan struct{}, 1)
	old.SetDisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case dropped <- struct{}{}:
		default:
		}
	})

	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	writeFile(t, d.set.Seed("tenant_a_new"), seed)
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	// The tenant's user block, copied with the new key written literally.
	start := strings.Index(string(data), "{\n        nkey: $TENANT_A_NKEY")
	end := strings.Index(string(data)[start:], "\n      }\n") + start + len("\n      }\n")
	block := string(data)[start:end]
	both := string(data[:end]) + "      " + strings.Replace(block, "$TENANT_A_NKEY", pub, 1) + string(data[end:])
	writeFile(t, conf, []byte(both))
	if err := d.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	newConn := func() (*nats.Conn, error) {
		key, err := nats.NkeyOptionFromSeed(d.set.Seed("tenant_a_new"))
		if err != nil {
			t.Fatal(err)
		}
		return nats.Connect(clientURL(t, d.srv), key, nats.RootCAs(d.set.Certs.CA), nats.CustomInboxPrefix("_INBOX_tenant_a"))
	}
	nc, err := newConn()
	if err != nil {
		t.Fatalf("new key after the first reload: %v", err)
	}
	nc.Close()
	if !old.IsConnected() {
		t.Fatal("the old key's connection dropped at the first reload")
	}

	writeFile(t, conf, []byte(strings.Replace(both, block, "", 1)))
	if err := d.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dropped:
	case <-time.After(wait):
		t.Fatal("the old key's connection survived its removal")
	}
	if nc, err := newConn(); err != nil {
		t.Fatalf("new key after the second reload: %v", err)
	} else {
		nc.Close()
	}
	key, err := nats.NkeyOptionFromSeed(d.set.Seed("tenant_a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect(clientURL(t, d.srv), key, nats.RootCAs(d.set.Certs.CA)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("old key after its removal: %v", err)
	}
}

// TestRotateCertificateByReload: new certificate files written over the
// old ones are served to new connections after a reload.
func TestRotateCertificateByReload(t *testing.T) {
	d := startRoot(t, false)
	// serial connects and returns the serial number of the certificate
	// the server presented.
	serial := func() string {
		var got string
		nc, err := nats.Connect(clientURL(t, d.srv), nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true, //nolint:gosec // the test checks the certificate itself
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				c, err := x509.ParseCertificate(raw[0])
				if err == nil {
					got = c.SerialNumber.String()
				}
				return nil
			}}))
		if nc != nil {
			nc.Close()
		}
		if got == "" {
			t.Fatalf("no certificate seen: %v", err)
		}
		return got
	}
	before := serial()
	fresh, err := devcerts.Write(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{fresh.ServerCert: d.set.Certs.ServerCert, fresh.ServerKey: d.set.Certs.ServerKey, fresh.CA: d.set.Certs.CA} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dst, data)
	}
	if err := d.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if after := serial(); after == before {
		t.Fatal("the server still presents the old certificate after the reload")
	}
}
