package domainserver

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/replica"
)

// ElectionKey is the election key of a node's domain partition i:
// <node>.domain.<i>.
func ElectionKey(node string, i int) string { return subjects.DomainElectionKey(node, i) }

// ReplicaOptions configure a Replica.
type ReplicaOptions struct {
	// Options configure the Server the replica runs while it leads. Term,
	// LearnUntil, Valid and JetStream are set by the replica.
	// StateReplicas defaults to Election.Replicas.
	Options
	// Election configures the partition's leader election; its key is
	// <node>.domain.<partition> (ElectionKey).
	Election replica.Election
}

// Replica is one of several replicas of a domain partition. It campaigns
// in the partition's election; while it leads it runs a Server. A leader
// that follows another one learns the live holds from their holders'
// refreshes for one hold TTL before it grants new copies.
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
		return nil, fmt.Errorf("domainserver: nil NATS connection")
	}
	if err := leader.FillElection("domainserver", &opts.Election); err != nil {
		return nil, err
	}
	if opts.StateReplicas == 0 {
		opts.StateReplicas = opts.Election.Replicas
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	return &Replica{nc: nc, opts: opts, beside: leader.Beside(nc, "election")}, nil
}

// Server returns the server of the current term, or nil when not leading.
func (r *Replica) Server() *Server {
	srv, _ := r.seat.Current()
	return srv
}

// Run campaigns and serves while leading until ctx ends; then it stops
// serving and resigns. It returns nil after ctx ends, or an error if the
// election cannot run.
//
// The election runs on a second connection to the same servers, with the
// options (credentials, TLS, reconnection, none of the callbacks) the
// replica's connection had when NewReplica was called, so that its
// keep-alives never queue behind requests: a flood of the service's
// subjects cannot make the leadership lapse.
func (r *Replica) Run(ctx context.Context) error {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return fmt.Errorf("domainserver: jetstream: %w", err)
	}
	start := func(ctx context.Context, el *election.Elector, term uint64) (*Server, error) {
		return r.start(ctx, js, el, term)
	}
	err = r.seat.Run(ctx, r.nc, leader.SeatConfig{
		Election: leader.ElectionConfig(r.opts.Election, ElectionKey(r.opts.Node, r.opts.Partition),
			r.opts.ServerID, r.opts.Logger.With("node", r.opts.Node, "domain_partition", r.opts.Partition)),
		What:         "domain partition " + strconv.Itoa(r.opts.Partition),
		ElectionConn: r.beside,
		OnServing:    r.opts.Election.OnServing,
	}, start)
	if err != nil {
		return fmt.Errorf("domainserver: %w", err)
	}
	return nil
}

// start starts the server of one term.
func (r *Replica) start(ctx context.Context, js jetstream.JetStream, el *election.Elector, term uint64) (*Server, error) {
	opts := r.opts.Options
	opts.Term, opts.JetStream = term, js
	opts.Valid = func() bool { return el.Valid(term) }
	founded, err := leader.Founded(ctx, el, term)
	if err != nil {
		return nil, err
	}
	if founded {
		// A predecessor may have granted holds that are still alive: hear
		// every holder's refresh (each refreshes three times per TTL)
		// before granting more.
		opts.LearnUntil = opts.Now().Add(opts.HoldTTL)
	}
	srv, err := New(r.nc, opts)
	return leader.Started(ctx, srv, err)
}
