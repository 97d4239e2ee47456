// Package embed runs an in-process nats-server with JetStream, for
// `allot up` and for tests.
package embed

import (
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
	if o.Cluster != nil {
		opts.Cluster = *o.Cluster
		opts.Routes = server.RoutesFromStr(joinRoutes(o.Routes))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embed: new server: %w", err)
	}
	if o.Log {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embed: server on %s:%d not ready after 20s", host, port)
	}
	return s, nil
}

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
