package subjects

import "strconv"

// EnvoyCount is the Envoy counters' one operation.
const EnvoyCount = "count"

// EnvoyCountSubject is allot.<node>.envoy.count.<token>, where the
// counters of the domain whose subject token is token are counted.
func EnvoyCountSubject(node, token string) string {
	return prefix + node + ".envoy." + EnvoyCount + "." + token
}

// EnvoyPartition is the prefix Envoy partition i subscribes to with ".>":
// mapped subjects arrive as allot.<node>.envoy.p.<i>.count.<token>.
func EnvoyPartition(node string, i int) string { return partition(node, "envoy", i) }

// EnvoyElectionKey is the election key of node's Envoy partition i:
// <node>.envoy.<i>.
func EnvoyElectionKey(node string, i int) string { return node + ".envoy." + strconv.Itoa(i) }

// EnvoyMappings returns the mapping that routes node's count subjects to
// n partitions by the domain token (partition(n,1)), so that a domain's
// counters live in one leader's memory. n ≤ 1 needs none (nil): partition
// 0 also subscribes to the count subjects themselves. Tenants' subjects
// are not served.
func EnvoyMappings(node string, n int) map[string]string {
	if n <= 1 {
		return nil
	}
	out := make(map[string]string, 1)
	partitioned{service: "envoy", names: 1, by: []int{1}}.add(out, node, EnvoyCount, n)
	return out
}
