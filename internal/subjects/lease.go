package subjects

import "strconv"

// MaxLeasePartitions bounds how many partitions a node's lease resources
// may be spread over.
const MaxLeasePartitions = 256

// LeasePartition returns the lease partition, in [0, n), that owns
// resource id when a node's resources are spread over n partitions: the
// 32-bit FNV-1a hash of the id's bytes, modulo n. Any client can compute
// it (subjects.md lists test vectors); n <= 1 is partition 0.
func LeasePartition(id string, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// LeaseSubject is the subject of a lease endpoint of node
// ("capacity.get", "capacity.refresh", "capacity.release", "server.get"
// or "server.get.<child>") served by partition i of n:
// allot.<node>.<endpoint> when n <= 1, and with n > 1 the partition's own
// allot.<node>.capacity.p.<i>.<op> or allot.<node>.server.p.<i>.get[.<child>].
func LeaseSubject(node, endpoint string, i, n int) string {
	if n <= 1 {
		return "allot." + node + "." + endpoint
	}
	group, op := endpoint, ""
	for k := 0; k < len(endpoint); k++ {
		if endpoint[k] == '.' {
			group, op = endpoint[:k], endpoint[k+1:]
			break
		}
	}
	return "allot." + node + "." + group + ".p." + strconv.Itoa(i) + "." + op
}

// LeaseElectionKey is partition i of n's key in the election bucket: the
// node itself when n <= 1 (as ever), else <node>.lease.<i>, so that each
// partition elects its own leader.
func LeaseElectionKey(node string, i, n int) string {
	if n <= 1 {
		return node
	}
	return node + ".lease." + strconv.Itoa(i)
}

// LeaseRecordKey is partition i of n's lease record key in the state
// bucket: <node>.leases when n <= 1 (as ever), else <node>.leases.<i>.
func LeaseRecordKey(node string, i, n int) string {
	if n <= 1 {
		return node + ".leases"
	}
	return node + ".leases." + strconv.Itoa(i)
}
