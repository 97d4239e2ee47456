// Package devcerts generates a certificate authority and the server and
// client certificates signed by it, for tests and for the development
// credentials of `allot secure init`. Keys are ECDSA P-256; the server
// certificate names 127.0.0.1, ::1 and localhost (plus any extra hosts)
// and serves for both server and client authentication, since NATS
// servers present it on route and leaf-node links they solicit.
package devcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Write produced, by absolute path.
type Files struct {
	// CA is the certificate of the authority that signed the others.
	CA string
	// ServerCert and ServerKey are the server's certificate and key.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client's certificate and key, for
	// servers that verify clients (mutual TLS).
	ClientCert, ClientKey string
}

// File names Write uses in its directory.
const (
	CAFile         = "ca.pem"
	ServerCertFile = "server-cert.pem"
	ServerKeyFile  = "server-key.pem"
	ClientCertFile = "client-cert.pem"
	ClientKeyFile  = "client-key.pem"
)

// Write generates a CA, a server certificate for 127.0.0.1, ::1,
// localhost and hosts (names or IP addresses), and a client certificate,
// all valid for validFor from an hour ago, and writes them to dir
// (created if needed) with the keys readable by the owner only.
func Write(dir string, validFor time.Duration, hosts ...string) (Files, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Files{}, fmt.Errorf("devcerts: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("devcerts: %w", err)
	}
	f := Files{CA: filepath.Join(dir, CAFile),
		ServerCert: filepath.Join(dir, ServerCertFile), ServerKey: filepath.Join(dir, ServerKeyFile),
		ClientCert: filepath.Join(dir, ClientCertFile), ClientKey: filepath.Join(dir, ClientKeyFile)}
	notBefore := time.Now().Add(-time.Hour)
	notAfter := notBefore.Add(validFor + time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("devcerts: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		Subject:   pkix.Name{CommonName: "allot development CA"},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, caCert, err := sign(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER, 0o644); err != nil {
		return Files{}, err
	}

	server := &x509.Certificate{
		Subject:   pkix.Name{CommonName: "allot NATS server"},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else if h != "" {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	if err := leaf(server, caCert, caKey, f.ServerCert, f.ServerKey); err != nil {
		return Files{}, err
	}
	client := &x509.Certificate{
		Subject:   pkix.Name{CommonName: "allot client"},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := leaf(client, caCert, caKey, f.ClientCert, f.ClientKey); err != nil {
		return Files{}, err
	}
	return f, nil
}

// leaf generates a key for tmpl, signs tmpl with the CA and writes both.
func leaf(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("devcerts: key: %w", err)
	}
	der, _, err := sign(tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("devcerts: key: %w", err)
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writePEM(keyFile, "EC PRIVATE KEY", keyDER, 0o600)
}

// sign gives tmpl a random serial number and signs it with parent's key.
func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("devcerts: serial: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("devcerts: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("devcerts: parse %q: %w", tmpl.Subject.CommonName, err)
	}
	return der, cert, nil
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("devcerts: %w", err)
	}
	return nil
}
