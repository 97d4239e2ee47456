package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/allot/allot/agent"
)

// connFlags are the connection flags of every command that connects to an
// existing NATS deployment (coordinator, get, release, status, config).
type connFlags struct {
	url         string
	creds       string
	nkey        string
	user        string
	password    string
	tlsCA       string
	tlsCert     string
	tlsKey      string
	inboxPrefix string
}

// defaultNATSURL is $NATS_URL, as the nats CLI and client libraries use it,
// else the local default.
func defaultNATSURL() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return nats.DefaultURL
}

// register adds the connection flags to fs. A back-quoted word in a
// usage string is the flag's argument name in the help (pflag's rule, as
// Go's flag package's): no other back quotes may appear in them.
func (c *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.url, "nats", defaultNATSURL(), "NATS server `URL`(s), comma separated; $NATS_URL, if set, is the default")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials `FILE` (JWT and NKey seed)")
	fs.StringVar(&c.nkey, "nkey", "", "`FILE` holding the NATS user's nkey seed (SU...), as 'allot secure init' writes under nkeys/")
	fs.StringVar(&c.user, "user", "", "NATS user `NAME` (with --password; a URL's user:password@ works too)")
	fs.StringVar(&c.password, "password", "", "NATS `PASSWORD` of --user (visible to other local users in the process list: prefer --nkey, or $NATS_URL with user:password@)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM `FILE` of the CA(s) that sign the NATS server's certificate (enables TLS)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM client certificate `FILE` for servers that verify clients (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	fs.StringVar(&c.inboxPrefix, "inbox-prefix", "", "`PREFIX` of reply subjects instead of _INBOX (for accounts that only allow some)")
}

// options turns the flags into connection options; files are read here so
// that a bad one is reported by its flag before any connection attempt.
func (c *connFlags) options() ([]nats.Option, error) {
	var opts []nats.Option
	if err := c.checkAuth(); err != nil {
		return nil, err
	}
	if c.creds != "" {
		if _, err := os.Stat(c.creds); err != nil {
			return nil, fmt.Errorf("--creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", c.nkey, err)
		}
		opts = append(opts, opt)
	}
	if c.user != "" {
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.tlsCA != "" || c.tlsCert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.tlsCA != "" {
			pem, err := os.ReadFile(c.tlsCA)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", c.tlsCA)
			}
		}
		if c.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(cfg))
	}
	if c.inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.inboxPrefix))
	}
	return opts, nil
}

// checkAuth refuses flags that name two ways to authenticate: the
// server would see only one of them, and which is not obvious.
func (c *connFlags) checkAuth() error {
	if c.password != "" && c.user == "" {
		return errors.New("--password needs --user")
	}
	var ways []string
	if c.creds != "" {
		ways = append(ways, "--creds")
	}
	if c.nkey != "" {
		ways = append(ways, "--nkey")
	}
	if c.user != "" {
		ways = append(ways, "--user")
	}
	if urlHasUser(c.url) {
		ways = append(ways, "user:password@ in the URL")
	}
	if len(ways) > 1 {
		return fmt.Errorf("%s: give one way to authenticate", strings.Join(ways, " and "))
	}
	return nil
}

// urlHasUser reports whether any of the comma-separated URLs carries
// user information.
func urlHasUser(urls string) bool {
	for u := range strings.SplitSeq(urls, ",") {
		if p, err := url.Parse(strings.TrimSpace(u)); err == nil && p.User != nil {
			return true
		}
	}
	return false
}

// redactURLs returns the comma-separated URLs with any password
// replaced, for error messages and logs.
func redactURLs(urls string) string {
	out := strings.Split(urls, ",")
	for i, u := range out {
		if p, err := url.Parse(strings.TrimSpace(u)); err == nil && p.User != nil {
			out[i] = p.Redacted()
		}
	}
	return strings.Join(out, ",")
}

// dial connects with the flags' options followed by extra, naming the
// connection name (as `nats server report connections` shows it).
func (c *connFlags) dial(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.options()
	if err != nil {
		return nil, err
	}
	// A refused permission reaches a client only asynchronously: log it
	// with its subject rather than leave a bare time-out.
	opts = append(append(opts, nats.Name(name), nats.ErrorHandler(agent.ErrorHandler(nil))), extra...)
	nc, err := nats.Connect(c.url, opts...)
	at := redactURLs(c.url)
	var unknownCA x509.UnknownAuthorityError
	switch {
	case errors.As(err, &unknownCA):
		return nil, fmt.Errorf("connect to NATS at %s: %w (--tls-ca names the CA that signed the server's certificate)", at, err)
	case errors.Is(err, nats.ErrAuthorization):
		return nil, fmt.Errorf("connect to NATS at %s: %w (the server knows no user with these credentials: check --nkey, --creds, --user/--password)", at, err)
	case err != nil && c.tlsCert == "" && strings.Contains(err.Error(), "tls"): // only a hint; the failure varies
		return nil, fmt.Errorf("connect to NATS at %s: %w (if the server verifies clients, give --tls-cert and --tls-key)", at, err)
	case err != nil:
		return nil, fmt.Errorf("connect to NATS at %s: %w", at, err)
	}
	return nc, nil
}
