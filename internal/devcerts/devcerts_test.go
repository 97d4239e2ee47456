package devcerts

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// TestWrite: the server certificate verifies under the CA for the
// loopback names and the extra hosts, for server and client use; the
// client certificate for client use; keys are private to the owner.
func TestWrite(t *testing.T) {
	f, err := Write(t.TempDir(), time.Hour, "allot.example", "10.0.0.1", "")
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate")
	}
	load := func(cert, key string) *x509.Certificate {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return pair.Leaf
	}
	server := load(f.ServerCert, f.ServerKey)
	for _, host := range []string{"127.0.0.1", "::1", "localhost", "allot.example", "10.0.0.1"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("server certificate for %s (usage %v): %v", host, usage, err)
			}
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example"}); err == nil {
		t.Error("server certificate verifies for a host it does not name")
	}
	client := load(f.ClientCert, f.ClientKey)
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verifies as a server's")
	}
	for _, key := range []string{f.ServerKey, f.ClientKey} {
		if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", key, st.Mode(), err)
		}
	}
}
