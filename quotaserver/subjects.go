package quotaserver

import (
	"fmt"
	"strconv"

	"github.com/allot/allot/internal/wire"
)

// TakeSubject is allot.<node>.quota.take: a take whose bucket is named in
// the payload. Any number of partitions serve it (partition 0's leader
// passes it on to the owner).
func TakeSubject(node string) string { return "allot." + node + ".quota.take" }

// ReportSubject is allot.<node>.quota.report: reports whose buckets are
// named in the payload.
func ReportSubject(node string) string { return "allot." + node + ".quota.report" }

// BucketSubject is the partitionable form of op ("take" or "report") for
// one bucket: allot.<node>.quota.<op>.<namespace>.<name>. A NATS subject
// mapping (Mappings) routes it to the partition that owns the namespace.
func BucketSubject(node, op, namespace, name string) string {
	return "allot." + node + ".quota." + op + "." + namespace + "." + name
}

// PartitionSubject is the subject prefix partition i subscribes to, with
// ".>": allot.<node>.quota.p.<i>. Mapped subjects arrive there as
// allot.<node>.quota.p.<i>.<op>.<namespace>.<name>.
func PartitionSubject(node string, i int) string {
	return "allot." + node + ".quota.p." + strconv.Itoa(i)
}

// ElectionKey is partition i's key in the election bucket:
// <node>.quota.<i>. Each partition elects its own leader.
func ElectionKey(node string, i int) string { return node + ".quota." + strconv.Itoa(i) }

// Mappings returns the NATS subject mappings (source → destination) that
// route node's bucket subjects to n partitions. The partition is a hash of
// the namespace token (nats-server's partition(n,1)): every bucket of a
// namespace is owned by one partition, so a namespace's shared default
// bucket and its max_dynamic_buckets cap are kept whole by one leader. n
// = 1 needs no mapping: partition 0 also subscribes to the bucket
// subjects themselves.
func Mappings(node string, n int) map[string]string {
	if n <= 1 {
		return nil
	}
	out := make(map[string]string, 4)
	for _, op := range []string{"take", "report"} {
		src := "allot." + node + ".quota." + op + ".*.*"
		out[src] = fmt.Sprintf("allot.%s.quota.p.{{partition(%d,1)}}.%s.{{wildcard(1)}}.{{wildcard(2)}}", node, n, op)
		// Tenants' subjects (TenantSubject), to the same partition, with
		// the tenant: allot.<node>.quota.p.<i>.t.<tenant>.<op>.<ns>.<name>.
		src = "allot.t.*." + node + ".quota." + op + ".*.*"
		out[src] = fmt.Sprintf("allot.%s.quota.p.{{partition(%d,2)}}.t.{{wildcard(1)}}.%s.{{wildcard(2)}}.{{wildcard(3)}}", node, n, op)
	}
	return out
}

// TenantSubject is subject (TakeSubject, ReportSubject or a
// BucketSubject) as a tenant's request arrives in the allot account
// through its service import: allot.t.<tenant>.<rest after "allot.">.
// The tenant token is the importing account's name
// (account_token_position), so it cannot be forged.
func TenantSubject(tenant, subject string) string { return wire.TenantSubject(tenant, subject) }
