package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/replica"
	"github.com/allot/allot/status"
)

// ReplicaServiceName is the NATS micro service every Replica registers,
// leader or follower, so that `allot status` and `nats micro stats
// allot-replica` list all replicas with their role.
const ReplicaServiceName = status.ReplicaService

// ReplicaOptions configure a Replica.
type ReplicaOptions struct {
	// Options configure the Coordinator the replica runs while it leads.
	// Term is ignored: the election sets it. StateReplicas defaults to
	// Election.Replicas.
	Options
	// Election configures the node's leader election; its key is the
	// node (<node>.lease.<i> for a lease partition).
	Election replica.Election
}

// ReplicaStatus describes a replica; it is the "data" of its micro STATS
// and the reply of allot.<node>.replica.status (status.Replica).
type ReplicaStatus = status.Replica

// Replica is one of several coordinator replicas of a tree node. It
// campaigns in the node's election; while it leads, it runs a fresh
// Coordinator whose term is the election's, and it stops that
// coordinator before its leadership can lapse. Only the leader subscribes
// to the node's subjects.
type Replica struct {
	nc   *nats.Conn
	opts ReplicaOptions
	seat leader.Seat[*Coordinator]
	// beside dials the election's connection with the options nc had
	// when NewReplica took them.
	beside func(*nats.Conn) (*nats.Conn, error)
	// holders dials the connection of the holders' refreshes
	// (Options.Beside), likewise.
	holders func(*nats.Conn) (*nats.Conn, error)
	// besideConn is the holders' connection of the current Run.
	besideConn *nats.Conn
}

// NewReplica validates opts and returns a Replica; Run it.
func NewReplica(nc *nats.Conn, opts ReplicaOptions) (*Replica, error) {
	if nc == nil {
		return nil, errors.New("coordinator: nil NATS connection")
	}
	if err := leader.FillElection("coordinator", &opts.Election); err != nil {
		return nil, err
	}
	if opts.StateReplicas == 0 {
		opts.StateReplicas = opts.Election.Replicas
	}
	filled := opts.Options
	if err := filled.fill(); err != nil {
		return nil, err
	}
	// Each term's New fills the options again, and a second fill would
	// read the 0 that NoRoundInterval and NoClockSkew became as "default":
	// keep them as given. Fix the identity now, the same for every term.
	opts.Node, opts.ServerID, opts.Templates, opts.Logger, opts.Now = filled.Node, filled.ServerID, filled.Templates, filled.Logger, filled.Now
	opts.Partitions = filled.Partitions
	return &Replica{nc: nc, opts: opts, beside: leader.Beside(nc, "election"), holders: leader.Beside(nc, "holders")}, nil
}

// Status returns the replica's current role and term.
func (r *Replica) Status() ReplicaStatus { return r.status(r.seat.Status()) }

func (r *Replica) status(ss leader.Status) ReplicaStatus {
	st := ReplicaStatus{Node: r.opts.Node, ServerID: r.opts.ServerID, Parent: r.opts.Parent, Partition: r.opts.Partition,
		Role: ss.Role, Term: ss.Term, Leader: ss.Leader, Serving: ss.Serving, Failure: ss.Failure}
	if r.opts.Partitions > 1 {
		st.Partitions = r.opts.Partitions
	}
	if src, ok := r.opts.Templates.(StatusSource); ok {
		st.Config = src.Status()
	}
	return st
}

// coordinator returns the coordinator of the term being served, or nil.
func (r *Replica) coordinator() *Coordinator {
	c, _ := r.seat.Current()
	return c
}

// Run campaigns and serves while leading until ctx ends; then it stops
// serving and resigns, so that a follower takes over at once. Every
// replica, leader or follower, registers the allot-replica service: its
// STATS data and the endpoint allot.<node>.replica.status (no queue
// group: every replica answers) report the replica's status. Run returns
// nil after ctx ends, or an error if the NATS connection closed or the
// election cannot run.
//
// The election runs on a second connection to the same servers, with the
// options (credentials, TLS, reconnection, none of the callbacks) the
// replica's connection had when NewReplica was called, so that its
// keep-alives never queue behind requests: a flood of the service's
// subjects cannot make the leadership lapse. The holders' refreshes have
// a third (Options.Beside), made alike, unless the options name one.
func (r *Replica) Run(ctx context.Context) error {
	r.besideConn = r.opts.Beside
	if r.besideConn == nil {
		hc, err := r.holders(r.nc)
		if err != nil {
			return fmt.Errorf("coordinator: holders' connection: %w", err)
		}
		defer hc.Close()
		r.besideConn = hc
	}
	err := r.seat.Run(ctx, r.nc, leader.SeatConfig{
		Election: leader.ElectionConfig(r.opts.Election, subjects.LeaseElectionKey(r.opts.Node, r.opts.Partition, r.opts.Partitions),
			r.opts.ServerID, r.opts.Logger.With("node", r.opts.Node, "lease_partition", r.opts.Partition)),
		What:         "coordinator",
		ElectionConn: r.beside,
		OnServing:    r.opts.Election.OnServing,
		Status: &leader.StatusService{
			Name: ReplicaServiceName, Version: ServiceVersion,
			Description: "allot coordinator replica of node " + r.opts.Node + " (leader or follower)",
			Metadata:    r.metadata(),
			Subject:     Subject(r.opts.Node, "replica.status"), EndpointMetadata: map[string]string{"node": r.opts.Node},
			Data: func(ss leader.Status) any { return r.status(ss) },
		},
	}, r.start)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}

// start starts a coordinator for one term; it stops serving on its own
// when a newer leader's record deposes it or its validity lapses.
func (r *Replica) start(ctx context.Context, el *election.Elector, term uint64) (*Coordinator, error) {
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := New(r.nc, r.termOptions(el, term))
	return leader.Started(startCtx, c, err)
}

// termOptions are the options of the coordinator of term.
func (r *Replica) termOptions(el *election.Elector, term uint64) Options {
	opts := r.opts.Options
	opts.Beside = r.besideConn
	opts.Term = term
	opts.Valid = func() bool { return el.Valid(term) }
	opts.TermBound = el.LastSequence
	opts.PriorLeader = func(ctx context.Context) (bool, error) { return el.Founded(ctx, term) }
	return opts
}

// metadata is the allot-replica service's metadata: node and server id,
// and the lease partition when the node has more than one.
func (r *Replica) metadata() map[string]string {
	md := map[string]string{"node": r.opts.Node, "server_id": r.opts.ServerID}
	if r.opts.Partitions > 1 {
		md["partition"], md["partitions"] = strconv.Itoa(r.opts.Partition), strconv.Itoa(r.opts.Partitions)
	}
	return md
}
