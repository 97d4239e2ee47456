// Package subjects owns allot's NATS names: every subject, the partition
// mappings, the KV buckets and their keys, and the tree node names they
// are built from, as subjects.md (the subject and bucket contract)
// documents them. It is the one place that spells them: the servers,
// the agent and the tools call it instead of writing "allot." themselves.
// It imports nothing of NATS, so that every layer, the decision cores and
// the election included, can use a name without linking a client.
package subjects

import "fmt"

// ValidateNode checks a tree node's name: 1 to 64 of [A-Za-z0-9_-], as it
// names subjects and a level's JetStream domain, and not "t": subjects
// allot.t.… are tenants' (allot.t.<tenant>.<node>.…), and a node named t
// would make its own subjects look like a tenant's and a tenant's like
// its own.
func ValidateNode(name string) error {
	ok := len(name) >= 1 && len(name) <= 64
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	switch {
	case !ok:
		return fmt.Errorf("node name %q must be 1-64 of [A-Za-z0-9_-]", name)
	case name == "t":
		return fmt.Errorf("node name %q is reserved: subjects allot.t.<tenant>.… are tenants'", name)
	}
	return nil
}
