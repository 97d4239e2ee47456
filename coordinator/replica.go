package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/election"
)

// ReplicaServiceName is the NATS micro service every Replica registers,
// leader or follower, so that `allot status` and `nats micro stats
// allot-replica` list all replicas with their role.
const ReplicaServiceName = "allot-replica"

// ReplicaOptions configure a Replica.
type ReplicaOptions struct {
	// Options configure the Coordinator the replica runs while it leads.
	// Term is ignored: the election sets it. StateReplicas defaults to
	// ElectionReplicas.
	Options
	// ElectionBucket is the KV bucket of the election; the key is the
	// node. Default election.DefaultBucket ("allot_election").
	ElectionBucket string
	// ElectionTTL is how long a silent leader keeps its key: whole
	// seconds, default 3s. An abrupt leader loss costs about TTL + 1s.
	ElectionTTL time.Duration
	// ElectionReplicas is the election bucket's replica count when this
	// replica creates it. Default 1; use 3 on a three-server cluster.
	ElectionReplicas int
	// OnServing, if set, is called when the replica starts serving as
	// leader (serving true, after the coordinator answers) and when it has
	// stopped serving (serving false, after the coordinator stopped).
	OnServing func(term uint64, serving bool)
}

// ReplicaStatus describes a replica; it is the "data" of its micro STATS
// and the reply of allot.<node>.replica.status.
type ReplicaStatus struct {
	Node     string `json:"node"`
	ServerID string `json:"server_id"`
	// Parent is the node's parent node (empty on a root).
	Parent string        `json:"parent,omitempty"`
	Role   election.Role `json:"role"`
	// Term is this replica's term while it leads, else the current
	// leader's as last seen (0 unknown).
	Term uint64 `json:"term"`
	// Leader is the current leader's server id as last seen.
	Leader string `json:"leader,omitempty"`
	// Serving is true while this replica's coordinator answers: it
	// leads, its leadership is valid and it has not stopped on its own.
	Serving bool `json:"serving"`
	// Failure says why a leader's coordinator stopped serving on its own
	// (deposed by a newer leader's record, leadership lapsed).
	Failure string `json:"failure,omitempty"`
	// Config is the configuration status of Options.Templates if it is a
	// StatusSource, so `allot config status` shows followers' views too.
	Config any `json:"config,omitempty"`
}

// Replica is one of several coordinator replicas of a tree node. It
// campaigns in the node's election; while it leads, it runs a fresh
// Coordinator whose term is the election's, and it stops that
// coordinator before its leadership can lapse. Only the leader subscribes
// to the node's subjects.
type Replica struct {
	nc   *nats.Conn
	opts ReplicaOptions

	mu      sync.Mutex
	el      *election.Elector
	serving uint64 // term served, 0 none
	coord   *Coordinator
}

// NewReplica validates opts and returns a Replica; Run it.
func NewReplica(nc *nats.Conn, opts ReplicaOptions) (*Replica, error) {
	if opts.ElectionReplicas == 0 {
		opts.ElectionReplicas = 1
	}
	if opts.StateReplicas == 0 {
		opts.StateReplicas = opts.ElectionReplicas
	}
	opts.Term = 1
	probe, err := New(nc, opts.Options) // validates and fills defaults
	if err != nil {
		return nil, err
	}
	opts.Options = probe.opts
	opts.Term = 0
	return &Replica{nc: nc, opts: opts}, nil
}

// Status returns the replica's current role and term.
func (r *Replica) Status() ReplicaStatus {
	st := ReplicaStatus{Node: r.opts.Node, ServerID: r.opts.ServerID, Parent: r.opts.Parent, Role: election.RoleFollower}
	r.mu.Lock()
	el, serving, c := r.el, r.serving, r.coord
	r.mu.Unlock()
	if el != nil {
		es := el.Status()
		st.Role, st.Term, st.Leader = es.Role, es.Term, es.Leader
	}
	st.Serving = serving != 0 && el != nil && el.Valid(serving)
	if c != nil {
		if err := c.Err(); err != nil {
			st.Serving = false
			st.Failure = err.Error()
		}
	}
	if src, ok := r.opts.Templates.(StatusSource); ok {
		st.Config = src.Status()
	}
	return st
}

// Run campaigns and serves while leading until ctx ends; then it stops
// serving and resigns, so that a follower takes over at once. It returns
// nil after ctx ends, or an error if the NATS connection closed or the
// election cannot run.
func (r *Replica) Run(ctx context.Context) error {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return fmt.Errorf("coordinator: jetstream: %w", err)
	}
	el, err := election.New(js, election.Config{
		Bucket:   r.opts.ElectionBucket,
		Key:      r.opts.Node,
		ID:       r.opts.ServerID,
		TTL:      r.opts.ElectionTTL,
		Replicas: r.opts.ElectionReplicas,
		Logger:   r.opts.Logger.With("node", r.opts.Node),
	})
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	r.mu.Lock()
	r.el = el
	r.mu.Unlock()

	svc, err := r.statusService()
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	return el.Run(ctx, election.Serve("coordinator", r.start, r.changed))
}

// start starts a coordinator for one term; it stops serving on its own
// when a newer leader's record deposes it or its validity lapses.
func (r *Replica) start(ctx context.Context, term uint64) (*Coordinator, error) {
	r.mu.Lock()
	el := r.el
	r.mu.Unlock()
	opts := r.opts.Options
	opts.Term = term
	opts.Valid = func() bool { return el.Valid(term) }
	opts.TermBound = el.LastSequence
	opts.PriorLeader = func(ctx context.Context) (bool, error) { return el.Founded(ctx, term) }
	c, err := New(r.nc, opts)
	if err != nil {
		return nil, err
	}
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Start(startCtx); err != nil {
		return nil, err
	}
	return c, nil
}

// changed records the coordinator serving (or no longer) and tells
// OnServing.
func (r *Replica) changed(term uint64, c *Coordinator, serving bool) {
	if serving {
		r.setServing(term, c)
	} else {
		r.setServing(0, nil)
	}
	if r.opts.OnServing != nil {
		r.opts.OnServing(term, serving)
	}
}

func (r *Replica) setServing(term uint64, c *Coordinator) {
	r.mu.Lock()
	r.serving, r.coord = term, c
	r.mu.Unlock()
}

// statusService registers the allot-replica service: STATS data and the
// endpoint allot.<node>.replica.status (no queue group: every replica
// answers) report the replica's status.
func (r *Replica) statusService() (micro.Service, error) {
	svc, err := micro.AddService(r.nc, micro.Config{
		Name:         ReplicaServiceName,
		Version:      ServiceVersion,
		Description:  "allot coordinator replica of node " + r.opts.Node + " (leader or follower)",
		Metadata:     map[string]string{"node": r.opts.Node, "server_id": r.opts.ServerID},
		StatsHandler: func(*micro.Endpoint) any { return r.Status() },
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: register %s service: %w", ReplicaServiceName, err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
		data, _ := json.Marshal(r.Status())
		_ = req.Respond(data)
	}), micro.WithEndpointSubject(Subject(r.opts.Node, "replica.status")), micro.WithEndpointQueueGroupDisabled(),
		micro.WithEndpointMetadata(map[string]string{"node": r.opts.Node}))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("coordinator: add replica status endpoint: %w", err)
	}
	return svc, nil
}
