// Package demo starts an embedded NATS server and a coordinator in the
// process, for the integrations' runnable examples.
package demo

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// Start starts a server in a temporary directory and a coordinator that
// gives each glob of rates its capacity, FAIR_SHARE, in leases of a
// minute (the examples print what a lease in force admits, which a
// shorter lease, lapsed while a loaded machine was slow, would not). It
// returns a connection to the server and a function that stops
// everything.
func Start(rates map[string]float64) (*nats.Conn, func(), error) {
	nc, stopServer, err := Server()
	if err != nil {
		return nil, nil, err
	}
	var tmpls []*config.Template
	for glob, capacity := range rates {
		tmpls = append(tmpls, &config.Template{Name: glob, Glob: glob, Capacity: capacity, Algorithm: allotpb.Algorithm_FAIR_SHARE,
			LeaseLength: time.Minute, RefreshInterval: time.Second})
	}
	c, err := coordinator.New(nc, coordinator.Options{
		RoundInterval: 5 * time.Millisecond,
		Templates:     sources.StaticTemplates(config.NewSet(1, tmpls, nil)),
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err == nil {
		err = c.Start(context.Background())
	}
	if err != nil {
		stopServer()
		return nil, nil, err
	}
	return nc, func() { c.Stop(); stopServer() }, nil
}

// Server starts an embedded NATS server in a temporary directory and
// connects to it; stop closes the connection and stops the server.
func Server() (nc *nats.Conn, stop func(), err error) {
	dir, err := os.MkdirTemp("", "allot-demo")
	if err != nil {
		return nil, nil, err
	}
	s, err := embed.Start(embed.Options{StoreDir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stopServer := func() { s.Shutdown(); s.WaitForShutdown(); os.RemoveAll(dir) }
	nc, err = nats.Connect(s.ClientURL())
	if err != nil {
		stopServer()
		return nil, nil, err
	}
	return nc, func() { nc.Close(); stopServer() }, nil
}

// Agent starts the demo and an agent on it; stop closes the agent and
// stops the demo.
func Agent(rates map[string]float64) (a *agent.Agent, stop func(), err error) {
	nc, stopDemo, err := Start(rates)
	if err != nil {
		return nil, nil, err
	}
	a, err = agent.New(nc, agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		stopDemo()
		return nil, nil, err
	}
	return a, func() { a.Close(); stopDemo() }, nil
}
