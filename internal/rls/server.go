package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// StopGrace bounds how long Serve waits for calls in progress (and RLQS
// streams) once its context ends; then it closes them.
const StopGrace = 2 * time.Second

// Server is a gRPC server on a listening socket: the Envoy-facing end of
// allot (RateLimitService, RateLimitQuotaService).
type Server struct {
	g      *grpc.Server
	lis    net.Listener
	log    *slog.Logger
	health *health.Server
}

// Listen binds addr (HOST:PORT; port 0 picks a free one) for a gRPC
// server with opts. Register services on GRPC, then Serve. The server
// also answers the standard gRPC health service (grpc.health.v1), SERVING
// while it serves: Kubernetes' grpc probes and Envoy's gRPC health checks
// ask it.
func Listen(addr string, log *slog.Logger, opts ...grpc.ServerOption) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rls: listen on %s: %w", addr, err)
	}
	s := &Server{g: grpc.NewServer(opts...), lis: lis, log: log, health: health.NewServer()}
	healthpb.RegisterHealthServer(s.g, s.health)
	return s, nil
}

// GRPC is the server to register services on before Serve.
func (s *Server) GRPC() *grpc.Server { return s.g }

// Addr is the address listened on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Serve serves until ctx ends, then stops gracefully within StopGrace.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.g.Serve(s.lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("rls: serve on %s: %w", s.lis.Addr(), err)
	case <-ctx.Done():
	}
	s.health.Shutdown() // NOT_SERVING: stop sending new calls here
	stopped := make(chan struct{})
	go func() {
		s.g.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(StopGrace):
		s.log.Warn("gRPC calls still open after the stop grace; closing them", "addr", s.lis.Addr().String())
		s.g.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("rls: serve on %s: %w", s.lis.Addr(), err)
	}
	return nil
}
