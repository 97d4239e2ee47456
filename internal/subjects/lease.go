package subjects

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
