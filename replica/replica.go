// Package replica holds what every elected allot service takes for its
// leader election: the coordinator's, the quota and domain partitions'
// and the Envoy counter partitions' ReplicaOptions each have an Election.
// Replicas of a tree node (or of one of its partitions) contend for one
// key of a JetStream key-value bucket; the one whose key lives serves,
// and a silent leader's key expires after the TTL, so that another
// replica takes over. See docs/election.md.
package replica

import (
	"fmt"
	"time"
)

// Defaults of Election.
const (
	// DefaultBucket is the election bucket of every allot service.
	DefaultBucket = "allot_election"
	// DefaultTTL is how long a silent leader keeps its key: an abrupt
	// leader loss costs about TTL + 1s.
	DefaultTTL = 3 * time.Second
	// DefaultReplicas is the election bucket's replica count: one server.
	DefaultReplicas = 1
)

// Election configures a replica's leader election. The zero value has the
// defaults; a TTL that is not whole seconds of at least 1s, or a negative
// replica count, is an error when the replica is made (see Validate).
type Election struct {
	// Bucket is the JetStream KV bucket of the election; each service
	// contends for its own key in it (subjects.md lists them). Default
	// DefaultBucket ("allot_election").
	Bucket string
	// TTL is how long a silent leader keeps its key: whole seconds, at
	// least 1s (the server's granularity). Default DefaultTTL (3s). An
	// abrupt leader loss costs about TTL + 1s; with Replicas above 1 use
	// 12s, which outlives the bucket's own stream electing a new leader
	// (docs/election.md).
	TTL time.Duration
	// Replicas is the election bucket's replica count when this replica
	// creates it. Default DefaultReplicas (1); use 3 on a three-server
	// cluster.
	Replicas int
	// OnServing, if set, is called when the replica starts serving as
	// leader (serving true, once its server answers) and when it has
	// stopped serving (serving false, once its server is silent).
	OnServing func(term uint64, serving bool)
}

// Validate reports what is wrong with e, if anything.
func (e Election) Validate() error {
	_, err := e.WithDefaults()
	return err
}

// WithDefaults returns e with its zero fields set to their defaults, or
// what is wrong with it (see Validate).
func (e Election) WithDefaults() (Election, error) {
	if e.Bucket == "" {
		e.Bucket = DefaultBucket
	}
	if e.TTL == 0 {
		e.TTL = DefaultTTL
	}
	if e.TTL < time.Second || e.TTL%time.Second != 0 {
		return e, fmt.Errorf("election TTL %v: want whole seconds, at least 1s", e.TTL)
	}
	if e.Replicas == 0 {
		e.Replicas = DefaultReplicas
	}
	if e.Replicas < 0 {
		return e, fmt.Errorf("election bucket replicas %d: want at least 1", e.Replicas)
	}
	return e, nil
}
