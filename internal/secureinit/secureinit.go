// Package secureinit writes the development credentials of the shipped
// secure NATS configuration (deploy/nats/secure): a CA with server and
// client certificates, an nkey seed file per user, and an environment
// file that sets every variable the configuration files reference. `allot
// secure init` and the security test suite use it, so the suite runs the
// same files operators start from.
package secureinit

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/allot/allot/internal/devcerts"
)

// Users of the shipped configuration, each with a seed file
// nkeys/<user>.nk. The *_leaf users are leaf-node links: a child
// server's for each tenant (leaf.conf), and child level region1's for its
// ALLOT account (level.conf); region1_coordinator and region1_admin are
// that level's own users.
var users = []string{"coordinator", "admin", "sys", "tenant_a", "tenant_b", "tenant_a_leaf", "tenant_b_leaf",
	"region1_coordinator", "region1_admin", "region1_leaf"}

// Users returns the users Init writes seeds for.
func Users() []string { return slices.Clone(users) }

// EnvFile is the environment file Init writes in its directory.
const EnvFile = "env"

// Setup is what Init wrote.
type Setup struct {
	// Dir is the directory, absolute.
	Dir string
	// Certs are the TLS files (in Dir/tls).
	Certs devcerts.Files
	// Env holds the variables of the configuration files, as written to
	// Dir/env.
	Env map[string]string
}

// Seed returns the path of user's nkey seed file.
func (s *Setup) Seed(user string) string { return filepath.Join(s.Dir, "nkeys", user+".nk") }

// InboxPrefix returns the reply-subject prefix user may subscribe to in
// the shipped configuration (for nats.CustomInboxPrefix or
// --inbox-prefix); "" for users without one (admin, sys).
func InboxPrefix(user string) string {
	switch user {
	case "coordinator":
		return "_INBOX_allot_coordinator"
	case "region1_coordinator":
		// Distinct from the root coordinator's: the root lets level
		// region1's link receive replies on this prefix only.
		return "_INBOX_allot_region1"
	case "tenant_a", "tenant_b":
		return "_INBOX_" + user
	}
	return ""
}

// Ports are where the root server of the shipped configuration listens,
// as the environment file sets them (CLIENT_PORT, LEAF_PORT,
// HTTP_LISTEN; PARENT_LEAF_URLS, for servers below it, names the leaf
// port on this host).
type Ports struct {
	// Client and Leaf are the client and leaf-node ports.
	Client, Leaf int
	// HTTP is the monitoring listen address, HOST:PORT.
	HTTP string
}

// DefaultPorts are nats-server's own: 4222, 7422 and 127.0.0.1:8222.
func DefaultPorts() Ports { return Ports{Client: 4222, Leaf: 7422, HTTP: "127.0.0.1:8222"} }

// check validates the ports: each in 1-65535, the monitoring address
// HOST:PORT, and no port used twice.
func (p Ports) check() error {
	host, hp, err := net.SplitHostPort(p.HTTP)
	if err != nil || host == "" {
		return fmt.Errorf("monitoring address %q: want HOST:PORT, such as 127.0.0.1:8222", p.HTTP)
	}
	httpPort, err := strconv.Atoi(hp)
	if err != nil {
		return fmt.Errorf("monitoring address %q: port %q is not a number", p.HTTP, hp)
	}
	seen := map[int]string{}
	for _, c := range []struct {
		what string
		port int
	}{{"client port", p.Client}, {"leaf-node port", p.Leaf}, {"monitoring port", httpPort}} {
		if c.port < 1 || c.port > 65535 {
			return fmt.Errorf("%s %d: want 1-65535", c.what, c.port)
		}
		if other, dup := seen[c.port]; dup {
			return fmt.Errorf("%s %d is also the %s", c.what, c.port, other)
		}
		seen[c.port] = c.what
	}
	return nil
}

// Init generates certificates valid for validFor (for the extra server
// hosts too), a seed per user, and the environment file, under dir, for
// a root server on DefaultPorts. It refuses a directory that already
// holds an environment file, so that credentials in use are never
// overwritten.
func Init(dir string, validFor time.Duration, hosts ...string) (*Setup, error) {
	return InitPorts(dir, validFor, DefaultPorts(), hosts...)
}

// InitPorts is Init for a root server listening on ports.
//
// The development CA's private key is not kept: it signs the server and
// client certificates and is discarded, so that nobody can sign another
// certificate with it (run InitPorts again, into a new directory, for
// other hosts).
func InitPorts(dir string, validFor time.Duration, ports Ports, hosts ...string) (*Setup, error) {
	if err := ports.check(); err != nil {
		return nil, fmt.Errorf("secure init: %w", err)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("secure init: %w", err)
	}
	if strings.ContainsAny(dir, "'\n") {
		return nil, fmt.Errorf("secure init: %q: a quote or newline in the directory would break the environment file", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, EnvFile)); err == nil {
		return nil, fmt.Errorf("secure init: %s already holds credentials (%s); remove it or choose another directory", dir, EnvFile)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("secure init: %w", err)
	}
	s := &Setup{Dir: dir, Env: map[string]string{}}
	if s.Certs, err = devcerts.Write(filepath.Join(dir, "tls"), validFor, hosts...); err != nil {
		return nil, fmt.Errorf("secure init: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "nkeys"), 0o700); err != nil {
		return nil, fmt.Errorf("secure init: %w", err)
	}
	for _, u := range users {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("secure init: nkey of %s: %w", u, err)
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		if err := os.WriteFile(s.Seed(u), append(seed, '\n'), 0o600); err != nil {
			return nil, fmt.Errorf("secure init: %w", err)
		}
		s.Env[strings.ToUpper(u)+"_NKEY"] = pub
		if strings.HasSuffix(u, "_leaf") {
			// A child server's link authenticates with the seed itself.
			s.Env[strings.ToUpper(u)+"_SEED"] = string(seed)
		}
	}
	for k, v := range map[string]string{
		"SERVER_NAME": "allot-root", "STORE_DIR": filepath.Join(dir, "jetstream"),
		"CLIENT_PORT": strconv.Itoa(ports.Client), "LEAF_PORT": strconv.Itoa(ports.Leaf), "HTTP_LISTEN": ports.HTTP,
		"TLS_CERT": s.Certs.ServerCert, "TLS_KEY": s.Certs.ServerKey, "TLS_CA": s.Certs.CA, "TLS_VERIFY": "false",
		"PARENT_LEAF_URLS": fmt.Sprintf("[tls://127.0.0.1:%d]", ports.Leaf),
	} {
		s.Env[k] = v
	}
	if err := os.WriteFile(filepath.Join(dir, EnvFile), []byte(s.envText()), 0o600); err != nil {
		return nil, fmt.Errorf("secure init: %w", err)
	}
	return s, nil
}

// envText is the environment file: NAME='value' lines, sorted, which a
// POSIX shell (set -a; . env) and systemd's EnvironmentFile both read.
func (s *Setup) envText() string {
	var b strings.Builder
	b.WriteString("# Variables of deploy/nats/secure/*.conf, written by allot secure init.\n")
	b.WriteString("# Secret: the *_LEAF_SEED values are credentials. Load with: set -a; . ./env; set +a\n")
	names := make([]string, 0, len(s.Env))
	for k := range s.Env {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%s='%s'\n", k, s.Env[k])
	}
	return b.String()
}

// MinServerVersion is the oldest nats-server whose root enforces a leaf
// link's permissions on the messages it sends, as the shipped
// configuration needs (docs/security.md).
const MinServerVersion = "2.14.0"
