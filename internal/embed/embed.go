// Package embed runs an in-process nats-server with JetStream, for
// `allot up` and for tests.
package embed

import (
	"crypto/tls"
	"errors"
	"fmt"
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
}

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
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
		ServerName: name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoLog:      !o.Log,
		NoSigs:     true,
		MaxPayload: 1 << 20,
	}
	if o.TLS != nil {
		opts.TLSConfig = o.TLS
		opts.TLSVerify = o.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	}
	if o.Cluster != nil {
		opts.Cluster = *o.Cluster
		opts.Routes = server.RoutesFromStr(joinRoutes(o.Routes))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embed: new server: %w", err)
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
