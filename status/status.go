// Package status holds the state that allot's servers report: the
// coordinator's snapshots, observations and replica status, and the
// STATS data of the quota, domain-limit and Envoy counter services. The
// servers fill these types; operators' tools (the dashboard, the metrics
// collectors, or a program of your own that decodes a STATS reply) read
// them without importing the servers. It imports nothing of NATS.
//
// The JSON of each type is the wire form of its STATS data or reply, as
// subjects.md documents it.
package status

import "strconv"

// Role is a replica's role in its node's (or partition's) election.
type Role string

// Roles.
const (
	RoleFollower Role = "follower"
	RoleLeader   Role = "leader"
)

// CodeLabel is the label value of an error code in a Call: the code in
// decimal, or "other".
func CodeLabel(code int) string {
	if code < 0 {
		return "other"
	}
	return strconv.Itoa(code)
}

// PartitionLeader identifies the leader of one partition of a per-request
// service (quota, domain limits, Envoy counters); its fields lead the
// service's STATS data.
type PartitionLeader struct {
	Node       string `json:"node"`
	ServerID   string `json:"server_id"`
	Partition  int    `json:"partition"`
	Partitions int    `json:"partitions"`
	Term       uint64 `json:"term"`
	// Serving is false once the server stopped or its leadership lapsed
	// (Failure says why).
	Serving bool   `json:"serving"`
	Failure string `json:"failure,omitempty"`
}

// The NATS micro services whose STATS data these types are: `nats micro
// stats <name> --json` shows them.
const (
	CoordinatorService = "allot"         // the serving leader of a node: Snapshot's counters
	ReplicaService     = "allot-replica" // every coordinator replica: Replica
	QuotaService       = "allot-quota"   // a quota partition's leader: Quota
	DomainService      = "allot-domain"  // a domain-limit partition's leader: Domain
	EnvoyService       = "allot-envoy"   // an Envoy counter partition's leader: Envoy
)

// Limits of a coordinator's snapshots and observations.
const (
	// MaxSnapshotClaimants bounds the claimants a Snapshot lists.
	MaxSnapshotClaimants = 1000
	// SnapshotResources is how many resources a Snapshot lists (those
	// with the most outstanding).
	SnapshotResources = 100
	// MaxSnapshotSearch bounds the length of a Snapshot's search string.
	MaxSnapshotSearch = 256
	// MaxObservedResources bounds the resources an Observation names:
	// the ones with the most outstanding; the others are summed in
	// Observation.Other, so that metrics stay bounded however many
	// resources clients name.
	MaxObservedResources = 100
)
