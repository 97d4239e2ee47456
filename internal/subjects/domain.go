package subjects

import "strconv"

// Domain-limit operations: the token after allot.<node>.domain.
const (
	DomainRequest  = "request"  // rate-limited: apply hits
	DomainReserve  = "reserve"  // copy-limited: take a hold
	DomainRelease  = "release"  // give copies of a hold back
	DomainRefresh  = "refresh"  // keep a client's holds alive
	DomainTransfer = "transfer" // stage copies of a hold for another process
	DomainSeize    = "seize"    // claim staged copies
)

// DomainOps returns every domain-limit operation.
func DomainOps() []string {
	return []string{DomainRequest, DomainReserve, DomainRelease, DomainRefresh, DomainTransfer, DomainSeize}
}

// Domain is allot.<node>.domain.<op>.<namespace>.<resource>.
func Domain(node, op, namespace, resource string) string {
	return prefix + node + ".domain." + op + "." + namespace + "." + resource
}

// TenantDomain is a domain subject as a tenant's request arrives in the
// allot account through the tenant's service import:
// allot.t.<tenant>.<node>.domain.<op>.<namespace>.<resource>.
func TenantDomain(tenant, node, op, namespace, resource string) string {
	return Tenant(tenant, Domain(node, op, namespace, resource))
}

// DomainAll is allot.<node>.domain.*.*.*, every domain subject of node.
func DomainAll(node string) string { return Domain(node, "*", "*", "*") }

// TenantDomainAll is allot.t.*.<node>.domain.*.*.*, every tenant's domain
// subject of node.
func TenantDomainAll(node string) string { return TenantDomain("*", node, "*", "*", "*") }

// DomainPartition is the prefix domain partition i of N > 1 subscribes to
// with ".>": mapped subjects arrive as
// allot.<node>.domain.p.<i>.<op>.<namespace>.<resource>.
func DomainPartition(node string, i int) string { return partition(node, "domain", i) }

// DomainElectionKey is domain partition i's key in the election bucket:
// <node>.domain.<i>.
func DomainElectionKey(node string, i int) string { return node + ".domain." + strconv.Itoa(i) }

// DomainSealKey is the state-bucket key of node's hold-sealing key:
// <node>.domain.seal.
func DomainSealKey(node string) string { return node + ".domain.seal" }

// DomainTransfersKey is the state-bucket key of domain partition i's
// staged transfers: <node>.domain.<i>.transfers.
func DomainTransfersKey(node string, i int) string { return DomainElectionKey(node, i) + ".transfers" }

// DomainMappings returns the mappings that spread node's domain subjects
// over n partitions by namespace and resource, so that every operation on
// one resource reaches the same partition; tenants' subjects go to the
// same partition, keeping the tenant:
// allot.<node>.domain.p.<i>.t.<tenant>.<op>.<namespace>.<resource>. The
// operation is a wildcard, so that one the service does not know still
// reaches a leader and is answered 400, as with one partition, and the
// partition hashes the same two tokens a per-operation mapping would. n ≤ 1
// needs none (nil).
func DomainMappings(node string, n int) map[string]string {
	if n <= 1 {
		return nil
	}
	p := prefix + node + ".domain.p.{{partition(" + strconv.Itoa(n) + ","
	return map[string]string{
		DomainAll(node):       p + "2,3)}}.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}",
		TenantDomainAll(node): p + "3,4)}}.t.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}",
	}
}
