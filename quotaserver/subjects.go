package quotaserver

import "github.com/allot/allot/internal/subjects"

// TakeSubject is allot.<node>.quota.take: a take whose bucket is named in
// the payload. Any number of partitions serve it (partition 0's leader
// passes it on to the owner).
func TakeSubject(node string) string { return subjects.Quota(node, subjects.QuotaTake) }

// ReportSubject is allot.<node>.quota.report: reports whose buckets are
// named in the payload.
func ReportSubject(node string) string { return subjects.Quota(node, subjects.QuotaReport) }

// BucketSubject is the partitionable form of op ("take" or "report") for
// one bucket: allot.<node>.quota.<op>.<namespace>.<name>. A NATS subject
// mapping (Mappings) routes it to the partition that owns the namespace.
func BucketSubject(node, op, namespace, name string) string {
	return subjects.QuotaBucket(node, op, namespace, name)
}

// PartitionSubject is the subject prefix partition i subscribes to, with
// ".>": allot.<node>.quota.p.<i>. Mapped subjects arrive there as
// allot.<node>.quota.p.<i>.<op>.<namespace>.<name>.
func PartitionSubject(node string, i int) string { return subjects.QuotaPartition(node, i) }

// ElectionKey is partition i's key in the election bucket:
// <node>.quota.<i>. Each partition elects its own leader.
func ElectionKey(node string, i int) string { return subjects.QuotaElectionKey(node, i) }

// Mappings returns the NATS subject mappings (source → destination) that
// route node's bucket subjects to n partitions. The partition is a hash of
// the namespace token (nats-server's partition(n,1)): every bucket of a
// namespace is owned by one partition, so a namespace's shared default
// bucket and its max_dynamic_buckets cap are kept whole by one leader. n
// = 1 needs no mapping: partition 0 also subscribes to the bucket
// subjects themselves.
// Tenants' subjects (TenantSubject) go to the same partition, with the
// tenant: allot.<node>.quota.p.<i>.t.<tenant>.<op>.<ns>.<name>.
func Mappings(node string, n int) map[string]string { return subjects.QuotaMappings(node, n) }

// TenantSubject is subject (TakeSubject, ReportSubject or a
// BucketSubject) as a tenant's request arrives in the allot account
// through its service import: allot.t.<tenant>.<the rest after allot>.
// The tenant token is the importing account's name
// (account_token_position), so it cannot be forged.
func TenantSubject(tenant, subject string) string { return subjects.Tenant(tenant, subject) }
