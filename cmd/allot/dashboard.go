package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/dashboard"
)

// mountDashboard serves the live dashboard of the replicas that replicas
// returns at "/" of mux (beside /metrics), and samples it until ctx ends;
// nc lists the node's other replicas and its quota namespaces.
func mountDashboard(ctx context.Context, mux *http.ServeMux, nc *nats.Conn, replicas func() []*coordinator.Replica, log *slog.Logger) error {
	d, err := dashboard.New(dashboard.Options{Source: dashboard.Replicas(replicas), Conn: nc, Logger: log})
	if err != nil {
		return err
	}
	go func() { _ = d.Run(ctx) }()
	mux.Handle("/", d.Handler(""))
	return nil
}
