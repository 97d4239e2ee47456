package subjects

import "strconv"

// Quota operations: the token after allot.<node>.quota.
const (
	QuotaTake   = "take"
	QuotaReport = "report"
)

// Quota returns the subject of a quota operation (QuotaTake or
// QuotaReport) whose buckets are named in the payload:
// allot.<node>.quota.<op>. Any number of partitions serve it (partition
// 0's leader passes it on to the owner).
func Quota(node, op string) string { return QuotaPrefix(node) + "." + op }

// QuotaPrefix is allot.<node>.quota, the prefix of node's quota subjects
// (the agent appends the operation and the bucket).
func QuotaPrefix(node string) string { return prefix + node + ".quota" }

// QuotaTenantPrefix is allot.t.*.<node>.quota, the prefix of every
// tenant's quota subjects of node, with a wildcard for the tenant.
func QuotaTenantPrefix(node string) string { return TenantPrefix + "*." + node + ".quota" }

// QuotaBucket is the partitionable form of op for one bucket:
// allot.<node>.quota.<op>.<namespace>.<name>. The mapping (QuotaMappings)
// routes it to the partition that owns the namespace.
func QuotaBucket(node, op, namespace, name string) string {
	return Quota(node, op) + "." + namespace + "." + name
}

// QuotaPartition is the subject prefix quota partition i subscribes to,
// with ".>": allot.<node>.quota.p.<i>. Mapped subjects arrive there as
// allot.<node>.quota.p.<i>.<op>.<namespace>.<name>.
func QuotaPartition(node string, i int) string { return partition(node, "quota", i) }

// QuotaElectionKey is quota partition i's key in the election bucket:
// <node>.quota.<i>.
func QuotaElectionKey(node string, i int) string { return node + ".quota." + strconv.Itoa(i) }

// QuotaMappings returns the mappings that route node's bucket subjects to
// n partitions by a hash of the namespace token (nats-server's
// partition(n,1)): every bucket of a namespace is owned by one partition,
// so a namespace's shared default bucket and its max_dynamic_buckets cap
// are kept whole by one leader. Tenants' subjects go to the same
// partition, keeping the tenant: allot.<node>.quota.p.<i>.t.<tenant>.<op>.<ns>.<name>.
// n ≤ 1 needs none (nil): partition 0 also subscribes to the bucket
// subjects themselves.
func QuotaMappings(node string, n int) map[string]string {
	if n <= 1 {
		return nil
	}
	out := make(map[string]string, 4)
	for _, op := range []string{QuotaTake, QuotaReport} {
		partitioned{service: "quota", names: 2, by: []int{1}, tenants: true}.add(out, node, op, n)
	}
	return out
}
