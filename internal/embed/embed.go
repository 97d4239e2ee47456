// Package embed runs an in-process nats-server with JetStream, for
// `allot up` and for tests.
package embed

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure an embedded server.
type Options struct {
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port for NATS clients; 0 picks a random free port.
	Port int
	// StoreDir is the JetStream store directory; required.
	StoreDir string
	// ServerName names the server (default "allot-embedded").
	ServerName string
	// Cluster, when set, joins an in-process cluster (tests of election).
	Cluster *server.ClusterOpts
	// Routes to other cluster members.
	Routes []string
	// Log enables the server's own logging.
	Log bool
	// TLS, when set, makes clients connect with TLS under this
	// configuration; with ClientAuth RequireAndVerifyClientCert they must
	// present a certificate.
	TLS *tls.Config
	// LeafNodePort, when not 0, accepts leaf-node connections from child
	// levels of the tree on this port; RandomPort picks a free one.
	LeafNodePort int
	// LeafRemotes are the URLs (nats-leaf://HOST:PORT) of the parent
	// level's servers: the server joins the first it reaches as a leaf
	// node, and keeps reconnecting while the link is down.
	LeafRemotes []string
	// LeafRemotesDisabled starts the server with its leaf remotes
	// configured but not connected. (To cut and restore a link at run time
	// put an internal/netcut relay on it: reloading the options to toggle
	// this races with the server's own readers of them.)
	LeafRemotesDisabled bool
	// LeafNoAdvertise keeps the server from telling its leaf nodes the
	// address of its leaf-node port: they then reconnect only to the URLs
	// they were given (a relay, a load balancer, a NAT address), never
	// around them to the address the server knows itself by.
	LeafNoAdvertise bool
	// Domain is the JetStream domain (allot uses the node name). Levels
	// joined by leaf nodes need distinct domains, so that each keeps its
	// own buckets: the server denies $JS and $KV traffic across a leaf
	// link whose sides have different domains.
	Domain string
	// Mappings are subject mappings (source → destination, with
	// nats-server's mapping functions such as {{partition(n,1)}}) in the
	// server's global account, where clients without accounts connect:
	// the quota service's partitions (quotaserver.Mappings).
	Mappings map[string]string
}

// RandomPort as LeafNodePort picks a free port.
const RandomPort = server.RANDOM_PORT

// serverOptions builds the nats-server options of o, validating what the
// server would otherwise only report through a fatal log.
func serverOptions(o Options) (*server.Options, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embed: StoreDir is required")
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	name := o.ServerName
	if name == "" {
		name = "allot-embedded"
	}
	opts := &server.Options{
		ServerName:      name,
		Host:            host,
		Port:            port,
		JetStream:       true,
		JetStreamDomain: o.Domain,
		StoreDir:        o.StoreDir,
		NoLog:           !o.Log,
		NoSigs:          true,
		MaxPayload:      1 << 20,
	}
	if o.TLS != nil {
		opts.TLSConfig = o.TLS
		opts.TLSVerify = o.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	}
	if o.Cluster != nil {
		opts.Cluster = *o.Cluster
		opts.Routes = server.RoutesFromStr(joinRoutes(o.Routes))
	}
	if o.LeafNodePort < RandomPort || o.LeafNodePort > 65535 {
		return nil, fmt.Errorf("embed: leaf-node port %d: want 1-65535, or %d for a free one", o.LeafNodePort, RandomPort)
	}
	if o.LeafNodePort != 0 {
		opts.LeafNode.Host = host
		opts.LeafNode.Port = o.LeafNodePort
		opts.LeafNode.NoAdvertise = o.LeafNoAdvertise
	}
	if len(o.LeafRemotes) > 0 {
		urls, err := LeafURLs(o.LeafRemotes)
		if err != nil {
			return nil, err
		}
		// A fresh RemoteLeafOpts on every call: a reload compares it with
		// the running one, and a shared pointer would show no change.
		opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: urls, Disabled: o.LeafRemotesDisabled}}
		opts.LeafNode.ReconnectInterval = time.Second
	}
	return opts, nil
}

// LeafURLs parses leaf-node remote URLs: nats-leaf://HOST:PORT (also
// nats://, tls:// and ws(s)://, which the server accepts too) with a host
// and a port.
func LeafURLs(raw []string) ([]*url.URL, error) {
	var out []*url.URL
	for _, r := range raw {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil {
			return nil, fmt.Errorf("embed: leaf remote %q: %w", r, err)
		}
		switch u.Scheme {
		case "nats-leaf", "nats", "tls", "ws", "wss":
		default:
			return nil, fmt.Errorf("embed: leaf remote %q: want nats-leaf://HOST:PORT", r)
		}
		if u.Hostname() == "" || u.Port() == "" {
			return nil, fmt.Errorf("embed: leaf remote %q: want nats-leaf://HOST:PORT (host and port)", r)
		}
		out = append(out, u)
	}
	return out, nil
}

// LeafNodeURL returns the nats-leaf:// URL on which s accepts leaf-node
// connections, or "" if it accepts none.
func LeafNodeURL(s *server.Server) string {
	v, err := s.Varz(nil)
	if err != nil || v.LeafNode.Port == 0 {
		return ""
	}
	host := v.LeafNode.Host
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return (&url.URL{Scheme: "nats-leaf", Host: net.JoinHostPort(host, strconv.Itoa(v.LeafNode.Port))}).String()
}

// LeafLinked reports whether s is joined to its parent: it has a leaf-node
// connection that it solicited.
func LeafLinked(s *server.Server) bool {
	lz, err := s.Leafz(nil)
	if err != nil {
		return false
	}
	for _, l := range lz.Leafs {
		if l.IsSpoke {
			return true
		}
	}
	return false
}

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	opts, err := serverOptions(o)
	if err != nil {
		return nil, err
	}
	host, port := opts.Host, opts.Port
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embed: new server: %w", err)
	}
	for _, src := range slices.Sorted(maps.Keys(o.Mappings)) {
		if err := s.GlobalAccount().AddMapping(src, o.Mappings[src]); err != nil {
			s.Shutdown()
			return nil, fmt.Errorf("embed: subject mapping %s -> %s: %w", src, o.Mappings[src], err)
		}
	}
	// The server reports a failure to listen (a busy port) only through its
	// logger's Fatalf, which would exit the process, and then never becomes
	// ready; catch it to fail at once with the server's own message.
	var inner server.Logger = nopLogger{}
	if o.Log {
		s.ConfigureLogger()
		inner = s.Logger()
	}
	fatal := make(chan string, 1)
	s.SetLoggerV2(fatalLogger{Logger: inner, fatal: fatal}, false, false, false)
	go s.Start()
	deadline := time.Now().Add(20 * time.Second)
	for !s.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			s.Shutdown()
			return nil, fmt.Errorf("embed: NATS server on %s:%d failed: %s", host, port, msg)
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("embed: server on %s:%d not ready after 20s", host, port)
		}
	}
	return s, nil
}

// fatalLogger passes the server's log on, except that Fatalf reports its
// message on fatal (the first one; later ones are only logged) instead of
// exiting.
type fatalLogger struct {
	server.Logger
	fatal chan<- string
}

func (l fatalLogger) Fatalf(format string, v ...any) {
	l.Errorf(format, v...)
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}

// nopLogger discards the server's log.
type nopLogger struct{}

func (nopLogger) Noticef(string, ...any) {}
func (nopLogger) Warnf(string, ...any)   {}
func (nopLogger) Fatalf(string, ...any)  {}
func (nopLogger) Errorf(string, ...any)  {}
func (nopLogger) Debugf(string, ...any)  {}
func (nopLogger) Tracef(string, ...any)  {}

func joinRoutes(r []string) string {
	out := ""
	for i, x := range r {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}
