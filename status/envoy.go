package status

// Envoy is the "data" of the envoy service's micro STATS: one partition's
// serving leader.
type Envoy struct {
	PartitionLeader
	// Counters is how many window counters the partition keeps (expired
	// ones until they are swept), MaxCounters its bound.
	Counters    int `json:"counters"`
	MaxCounters int `json:"max_counters"`
	// Requests counts count requests over NATS, Local those of front
	// ends in this process, Hits the hits added by both.
	Requests uint64 `json:"requests"`
	Local    uint64 `json:"local"`
	Hits     uint64 `json:"hits"`
	// Full counts requests refused at MaxCounters, Overflows those
	// refused because a counter would pass 2^63-1.
	Full      uint64 `json:"full"`
	Overflows uint64 `json:"overflows"`
	// Silenced counts replies withheld because the server may no longer
	// answer.
	Silenced uint64 `json:"silenced"`
}
