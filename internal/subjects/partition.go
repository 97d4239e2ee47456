package subjects

import (
	"fmt"
	"strconv"
	"strings"
)

// Mappings returns every subject mapping (source → destination) that n
// partitions of node need: the quota, domain-limit and Envoy counter
// ones. One partition needs none (nil).
func Mappings(node string, n int) map[string]string {
	if n <= 1 {
		return nil
	}
	out := QuotaMappings(node, n)
	for src, dst := range DomainMappings(node, n) {
		out[src] = dst
	}
	for src, dst := range EnvoyMappings(node, n) {
		out[src] = dst
	}
	return out
}

// partitioned is how a service spreads its subjects over partitions.
type partitioned struct {
	service string // the token after the node: "quota", "domain", "envoy"
	names   int    // wildcard tokens after the operation
	by      []int  // which of them (from 1) the partition hashes
	tenants bool   // whether tenants' subjects are mapped too
}

// add puts into out the mappings of op of node's service to n partitions:
//
//	allot.<node>.<service>.<op>.*… → allot.<node>.<service>.p.{{partition(n,by…)}}.<op>.{{wildcard(1)}}…
//
// and, with tenants, the tenants' subjects to the same partition with the
// tenant kept:
//
//	allot.t.*.<node>.<service>.<op>.*… → allot.<node>.<service>.p.{{partition(n,by+1…)}}.t.{{wildcard(1)}}.<op>.{{wildcard(2)}}…
func (p partitioned) add(out map[string]string, node, op string, n int) {
	stars := strings.Repeat(".*", p.names)
	dst := func(shift int) string {
		by := make([]string, len(p.by))
		for i, t := range p.by {
			by[i] = strconv.Itoa(t + shift)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s%s.%s.p.{{partition(%d,%s)}}.", prefix, node, p.service, n, strings.Join(by, ","))
		if shift > 0 {
			b.WriteString("t.{{wildcard(1)}}.")
		}
		b.WriteString(op)
		for w := 1; w <= p.names; w++ {
			fmt.Fprintf(&b, ".{{wildcard(%d)}}", w+shift)
		}
		return b.String()
	}
	out[prefix+node+"."+p.service+"."+op+stars] = dst(0)
	if p.tenants {
		out[TenantPrefix+"*."+node+"."+p.service+"."+op+stars] = dst(1)
	}
}

// partition is the subject prefix partition i of node's service
// subscribes to, with ".>": allot.<node>.<service>.p.<i>.
func partition(node, service string, i int) string {
	return prefix + node + "." + service + ".p." + strconv.Itoa(i)
}
