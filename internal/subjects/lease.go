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
		return prefix + node + "." + endpoint
	}
	group, op := endpoint, ""
	for k := 0; k < len(endpoint); k++ {
		if endpoint[k] == '.' {
			group, op = endpoint[:k], endpoint[k+1:]
			break
		}
	}
	return prefix + node + "." + group + ".p." + strconv.Itoa(i) + "." + op
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

// LeasePartitionsKey is the state bucket key that says the number of
// lease partitions node serves under, and whether it changed.
func LeasePartitionsKey(node string) string { return node + ".lease-partitions" }

// The coordinator's endpoints: the tokens after allot.<node>.
const (
	CapacityGet     = "capacity.get"     // GetCapacity
	CapacityRefresh = "capacity.refresh" // a holder's GetCapacity
	CapacityRelease = "capacity.release" // ReleaseCapacity
	ServerGet       = "server.get"       // GetServerCapacity of a child node
	ReplicaStatus   = "replica.status"   // every replica's status
)

// prefix starts every allot subject.
const prefix = "allot."

// Coordinator returns the subject of a coordinator endpoint of node
// (CapacityGet, ServerGet, …, or a wildcard such as "capacity.*"):
// allot.<node>.<endpoint>.
func Coordinator(node, endpoint string) string { return prefix + node + "." + endpoint }

// TenantCoordinator returns the subject on which tenant's requests for a
// coordinator endpoint of node arrive in the allot account once its
// service import has mapped them: allot.t.<tenant>.<node>.<endpoint>.
func TenantCoordinator(tenant, node, endpoint string) string {
	return TenantPrefix + tenant + "." + node + "." + endpoint
}

// ChildServerGet is the subject a child node's link asks its parent on:
// allot.<parent>.server.get.<child>. The child's name in the subject lets
// a deployment allow each child's link only its own subject.
func ChildServerGet(parent, child string) string {
	return Coordinator(parent, ServerGet+"."+child)
}
