package status

import "time"

// Snapshot is a coordinator's state at one instant, taken on its round
// loop: nothing in it is torn between rounds.
type Snapshot struct {
	Time     time.Time `json:"time"`
	Node     string    `json:"node"`
	ServerID string    `json:"server_id"`
	// Role is the replica's role in the node's election ("leader",
	// "follower"); empty for a coordinator run without the election.
	Role string `json:"role,omitempty"`
	// Term is the fencing term served (a follower's: its leader's as last
	// seen), Leader the leader's server id as last seen by a replica.
	Term   uint64 `json:"term"`
	Leader string `json:"leader,omitempty"`
	// Serving is true while this coordinator answers requests; Failure
	// says why it stopped on its own.
	Serving bool   `json:"serving"`
	Failure string `json:"failure,omitempty"`
	// Parent is the parent node (empty on a root); ParentError is set
	// while it cannot be reached, ParentLastOK is its last answer.
	Parent       string    `json:"parent,omitempty"`
	ParentError  string    `json:"parent_error,omitempty"`
	ParentLastOK time.Time `json:"parent_last_ok,omitzero"`
	// Resources are the SnapshotResources resources with the most
	// outstanding, of ResourceCount in all, and Clients the client records
	// over all of them.
	Resources     []ResourceView `json:"resources"`
	ResourceCount int            `json:"resource_count"`
	Clients       int            `json:"clients"`
	// Resource is the resource asked for, nil if none was or the node
	// keeps no state for it.
	Resource *ResourceDetail `json:"resource,omitempty"`
	// Config is the template source's status (the configuration
	// watcher's under `allot up` and `allot coordinator`), nil if it
	// reports none.
	Config any `json:"config,omitempty"`
}

// Replica describes a coordinator replica; it is the "data" of its micro STATS
// and the reply of allot.<node>.replica.status.
type Replica struct {
	Node     string `json:"node"`
	ServerID string `json:"server_id"`
	// Partition and Partitions say which lease partition the replica
	// campaigns for, when the node has more than one.
	Partition  int `json:"partition,omitempty"`
	Partitions int `json:"partitions,omitempty"`
	// Parent is the node's parent node (empty on a root).
	Parent string `json:"parent,omitempty"`
	Role   Role   `json:"role"`
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
	// Config is the configuration status of the coordinator's templates,
	// if their source reports one, so `allot config status` shows
	// followers' views too.
	Config any `json:"config,omitempty"`
}

// Observation is a snapshot of a coordinator (or replica) for metrics and
// health checks. Counters count since the coordinator started: a replica
// starts a new coordinator each time it wins the election.
type Observation struct {
	Node     string
	ServerID string
	// Partition is the lease partition the replica campaigns for (0 on
	// a node of one partition), Partitions the node's number of them.
	Partition, Partitions int
	// Parent is the parent node; empty on a root.
	Parent string
	// Role is the replica's role in the node's election; a Coordinator
	// run without a Replica reports itself leader.
	Role Role
	// Term is the term served while leading, else the leader's last seen.
	Term uint64
	// Leader is the leading replica's server id as last seen.
	Leader string
	// Serving is true while this process's coordinator answers requests.
	Serving bool
	// Failure says why the coordinator stopped serving on its own.
	Failure string
	// Coordinator reports whether the fields below describe a running
	// coordinator; false on a follower.
	Coordinator bool

	Rounds uint64
	// RoundSeconds is the distribution of round durations.
	RoundSeconds Histogram
	// Calls counts requests by subject, and error replies by subject and
	// code; see Call.
	Calls []Call
	// Lease-record activity: committed writes, failed writes, resource
	// rounds that waited for a write, stored records found not ours,
	// records ignored as forged.
	RecordWrites, RecordErrors, RecordWaits, ForeignRecords, ForgedRecords uint64
	// CutLeases counts leases cut short to the lease record (its writes
	// did not keep up), zero-length ones included.
	CutLeases uint64
	// Silenced counts replies withheld because the coordinator could no
	// longer answer.
	Silenced uint64
	// Resources and Clients are the resources and client records kept.
	Resources, Clients int
	// Top are the resources with the most outstanding (at most
	// MaxObservedResources), refreshed every second; Other sums the
	// remaining resources.
	Top   []ResourceGauge
	Other ResourceTotals
	// ConfigGeneration is the generation of the templates in force.
	ConfigGeneration uint64
	// ConfigRejected counts template puts rejected as invalid, when the
	// templates come from a configuration watcher (else 0).
	ConfigRejected uint64
	// ConfigLoaded is false until the templates were read: while the
	// source's set has generation 0, as a configuration watcher's has
	// before its first read.
	ConfigLoaded bool
}

// Call counts requests to one endpoint subject (Code 0) or its error
// replies with one code.
type Call struct {
	// Subject is the endpoint: "capacity.get", "capacity.release",
	// "server.get" or "other" (an unknown operation).
	Subject string
	// Code is 0 for all requests received, else an error code sent (-1:
	// a code outside the documented ones).
	Code int
	N    uint64
}

// Histogram is a cumulative histogram of durations in seconds.
type Histogram struct {
	// Bounds are the buckets' upper bounds; Counts[i] counts observations
	// at most Bounds[i] (cumulative).
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}
