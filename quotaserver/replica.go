package quotaserver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/replica"
	"github.com/allot/allot/status"
)

// ReplicaOptions configure a Replica.
type ReplicaOptions struct {
	// Options configure the Server the replica runs while it leads. Term,
	// Since and Valid are ignored: the election sets them.
	Options
	// Election configures the partition's leader election; its key is
	// <node>.quota.<partition> (ElectionKey).
	Election replica.Election
}

// ReplicaStatus describes a replica.
type ReplicaStatus struct {
	Node      string      `json:"node"`
	Partition int         `json:"partition"`
	ServerID  string      `json:"server_id"`
	Role      status.Role `json:"role"`
	// Term is this replica's term while it leads, else the current
	// leader's as last seen (0 unknown).
	Term   uint64 `json:"term"`
	Leader string `json:"leader,omitempty"`
	// Serving is true while this replica's server answers.
	Serving bool `json:"serving"`
}

// Replica is one of several replicas of a quota partition. It campaigns
// in the partition's election; while it leads it runs a fresh Server whose
// buckets start drained at the term's start (full only for the
// partition's first leader ever), and it stops that server before its
// leadership can lapse.
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
		return nil, fmt.Errorf("quotaserver: nil NATS connection")
	}
	if err := leader.FillElection("quotaserver", &opts.Election); err != nil {
		return nil, err
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	return &Replica{nc: nc, opts: opts, beside: leader.Beside(nc, "election")}, nil
}

// Status returns the replica's role and term.
func (r *Replica) Status() ReplicaStatus {
	ss := r.seat.Status()
	return ReplicaStatus{Node: r.opts.Node, Partition: r.opts.Partition, ServerID: r.opts.ServerID,
		Role: ss.Role, Term: ss.Term, Leader: ss.Leader, Serving: ss.Serving}
}

// Server returns the server of the current term, or nil when not leading.
func (r *Replica) Server() *Server {
	srv, _ := r.seat.Current()
	return srv
}

// Run campaigns and serves while leading until ctx ends; then it stops
// serving and resigns so that a follower takes over at once. It returns
// nil after ctx ends, or an error if the election cannot run.
//
// The election runs on a second connection to the same servers, with the
// options (credentials, TLS, reconnection, none of the callbacks) the
// replica's connection had when NewReplica was called, so that its
// keep-alives never queue behind requests: a flood of the service's
// subjects cannot make the leadership lapse.
func (r *Replica) Run(ctx context.Context) error {
	err := r.seat.Run(ctx, r.nc, leader.SeatConfig{
		Election: leader.ElectionConfig(r.opts.Election, ElectionKey(r.opts.Node, r.opts.Partition),
			r.opts.ServerID, r.opts.Logger.With("node", r.opts.Node, "quota_partition", r.opts.Partition)),
		What:         "quota partition " + strconv.Itoa(r.opts.Partition),
		ElectionConn: r.beside,
		OnServing:    r.opts.Election.OnServing,
	}, r.start)
	if err != nil {
		return fmt.Errorf("quotaserver: %w", err)
	}
	return nil
}

// start starts the server of one term.
func (r *Replica) start(ctx context.Context, el *election.Elector, term uint64) (*Server, error) {
	opts := r.opts.Options
	opts.Term = term
	opts.Valid = func() bool { return el.Valid(term) }
	// Nothing is known of what the previous leader admitted, so buckets
	// start as if drained when its last admissions took effect: its last
	// decision was before this term began, and an OK_WAIT it answered
	// takes effect up to the longest wait later. A failover so never
	// admits more than a bucket's limit. Only the partition's very first
	// leader, with no predecessor, starts them full.
	opts.Since = opts.Now().Add(longestWait(sources.CurrentQuota(opts.Config)))
	founded, err := leader.Founded(ctx, el, term)
	if err != nil {
		return nil, err
	}
	if !founded {
		opts.Since = time.Time{}
	}
	srv, err := New(r.nc, opts)
	return leader.Started(ctx, srv, err)
}

// longestWait is the longest wait any bucket of cfg can answer OK_WAIT
// with: its wait_timeout, and for a TOKEN_BUCKET no more than its
// max_debt. A new leader counts its buckets as drained that long after
// its term began, since its predecessor's last OK_WAIT answers take
// effect until then.
func longestWait(cfg *quota.Config) time.Duration {
	var longest time.Duration
	if cfg == nil {
		return 0
	}
	wait := func(s *quota.Spec) {
		if s == nil {
			return
		}
		d := s.WaitTimeout
		if s.Algorithm == quota.TokenBucket {
			d = min(d, s.MaxDebt)
		}
		longest = max(longest, d)
	}
	for _, ns := range cfg.Namespaces {
		wait(ns.Default)
		wait(ns.Dynamic)
		for _, s := range ns.Buckets {
			wait(s)
		}
	}
	return longest
}
