package envoyserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/envoywire"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/replica"
)

// ReplicaOptions configure a Replica.
type ReplicaOptions struct {
	// Options configure the Server the replica runs while it leads. Term
	// and Valid are set by the replica.
	Options
	// Election configures the partition's leader election; its key is
	// <node>.envoy.<partition>.
	Election replica.Election
}

// Replica is one of several replicas of an Envoy counter partition. It
// campaigns in the partition's election and runs a Server while it
// leads. A new leader starts with no counters: what its predecessor
// counted in the current windows is not known to it (see docs/envoy.md).
type Replica struct {
	nc   *nats.Conn
	opts ReplicaOptions
	seat leader.Seat[*Server]
	// beside dials the election's connection with the options nc had
	// when NewReplica took them.
	beside func(*nats.Conn) (*nats.Conn, error)
}

// NewReplica validates opts and returns a Replica; Run it.
func NewReplica(nc *nats.Conn, opts ReplicaOptions) (*Replica, error) {
	if nc == nil {
		return nil, errors.New("envoyserver: nil NATS connection")
	}
	if err := leader.FillElection("envoyserver", &opts.Election); err != nil {
		return nil, err
	}
	// Each term's New fills the options again, and a second fill would
	// read the 0 that NoClockSkew became as the default: keep the skew as
	// given.
	skew := opts.ClockSkew
	if err := opts.fill(); err != nil {
		return nil, err
	}
	opts.ClockSkew = skew
	return &Replica{nc: nc, opts: opts, beside: leader.Beside(nc, "election")}, nil
}

// Server returns the server of the current term, or nil when not leading.
func (r *Replica) Server() *Server {
	srv, _ := r.seat.Current()
	return srv
}

// Partition is the partition the replica campaigns for.
func (r *Replica) Partition() int { return r.opts.Partition }

// Run campaigns and serves while leading until ctx ends; then it stops
// serving and resigns so that a follower takes over at once. It returns
// nil after ctx ends, or an error if the election cannot run.
//
// The election runs on a second connection to the same servers, with the
// options (credentials, TLS, reconnection, none of the callbacks) the
// replica's connection had when NewReplica was called, so that its
// keep-alives never queue behind count requests: a flood of Envoy calls
// cannot make the leadership lapse.
func (r *Replica) Run(ctx context.Context) error {
	err := r.seat.Run(ctx, r.nc, leader.SeatConfig{
		Election: leader.ElectionConfig(r.opts.Election, envoywire.ElectionKey(r.opts.Node, r.opts.Partition),
			r.opts.ServerID, r.opts.Logger.With("node", r.opts.Node, "envoy_partition", r.opts.Partition)),
		What:         "envoy partition " + strconv.Itoa(r.opts.Partition),
		ElectionConn: r.beside,
		OnServing:    r.opts.Election.OnServing,
	}, r.start)
	if err != nil {
		return fmt.Errorf("envoyserver: %w", err)
	}
	return nil
}

// start starts the server of one term.
func (r *Replica) start(ctx context.Context, el *election.Elector, term uint64) (*Server, error) {
	opts := r.opts.Options
	opts.Term = term
	opts.Valid = func() bool { return el.Valid(term) }
	srv, err := New(r.nc, opts)
	return leader.Started(ctx, srv, err)
}

// Serving reports whether the replica leads and its server answers.
func (r *Replica) Serving() bool {
	srv := r.Server()
	return srv != nil && srv.Serving()
}
