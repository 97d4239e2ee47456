package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/subjects"
)

// isolationFlags bound what one tenant or one child node can take of a
// node: the node's caps per tenant and the clients a child's claim
// counts for (coordinator.Options).
type isolationFlags struct {
	tenantMaxRes     positiveInt
	tenantMaxClients positiveInt
	childMaxClients  int64
	childClients     childBounds
}

func (f *isolationFlags) register(fs *pflag.FlagSet) {
	fs.Var(goFlag(&f.tenantMaxRes, "N"), "tenant-max-resources", "most resources of the node one tenant (NATS account) may have clients on, whatever the templates say; its requests for more new ones get error 429 (default a tenth of --max-resources; at most --max-resources)")
	fs.Var(goFlag(&f.tenantMaxClients, "N"), "tenant-max-clients", "most client records one tenant may keep on the node; requests adding more get error 429 (default a tenth of --max-clients; at most --max-clients)")
	fs.Int64Var(&f.childMaxClients, "child-max-clients", coordinator.DefaultChildMaxClients, "most clients a child node's claim counts for in the share algorithms, whatever it claims (see --child-clients for a bound per child)")
	fs.Var(goFlag(&f.childClients, "NODE=N,..."), "child-clients", "bounds per child node in place of --child-max-clients, as NODE=N pairs: eu=5000,ap=2000 (repeatable)")
}

// validate checks the flags against the node's --max-resources and
// --max-clients, and the child bounds against the tree flags.
func (f *isolationFlags) validate(cf *coordFlags) error {
	for _, c := range []struct {
		name, node string
		v          positiveInt
		limit      int
	}{
		{"--tenant-max-resources", "--max-resources", f.tenantMaxRes, cf.maxRes},
		{"--tenant-max-clients", "--max-clients", f.tenantMaxClients, cf.maxClients},
	} {
		if c.v.set && c.v.n > c.limit {
			return fmt.Errorf("%s %d is above %s %d: one tenant's share of the node cannot be more than the node", c.name, c.v.n, c.node, c.limit)
		}
	}
	if f.childMaxClients < 1 {
		return fmt.Errorf("--child-max-clients %d: want a positive number of clients", f.childMaxClients)
	}
	for child := range f.childClients.m {
		if child == cf.node || child == cf.parent {
			return fmt.Errorf("--child-clients %s: %q is this node or its parent (--node, --parent-node), not a child", child, child)
		}
	}
	return nil
}

// apply sets the flags' options on o.
func (f *isolationFlags) apply(o *coordinator.Options) {
	o.TenantMaxResources, o.TenantMaxClients = f.tenantMaxRes.n, f.tenantMaxClients.n
	o.ChildMaxClients, o.ChildClients = f.childMaxClients, maps.Clone(f.childClients.m)
}

// positiveInt is an optional flag value that must be a positive whole
// number when given; unset it is 0 (the option's default).
type positiveInt struct {
	n   int
	set bool
}

func (p *positiveInt) String() string {
	if p == nil || !p.set {
		return ""
	}
	return strconv.Itoa(p.n)
}

func (p *positiveInt) Set(v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return fmt.Errorf("want a positive whole number")
	}
	*p = positiveInt{n: n, set: true}
	return nil
}

// childBounds is the value of --child-clients: a bound per child node.
type childBounds struct{ m map[string]int64 }

func (c *childBounds) String() string {
	if c == nil || len(c.m) == 0 {
		return ""
	}
	out := make([]string, 0, len(c.m))
	for _, child := range slices.Sorted(maps.Keys(c.m)) {
		out = append(out, child+"="+strconv.FormatInt(c.m[child], 10))
	}
	return strings.Join(out, ",")
}

// Set adds NODE=N pairs; a node named twice, on one flag or several, is
// an error.
func (c *childBounds) Set(v string) error {
	add := map[string]int64{}
	for pair := range strings.SplitSeq(v, ",") {
		pair = strings.TrimSpace(pair)
		child, num, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("%q: want NODE=N pairs, comma-separated, such as eu=5000,ap=2000", pair)
		}
		child = strings.TrimSpace(child)
		if err := subjects.ValidateNode(child); err != nil {
			return fmt.Errorf("%q: %w", child, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("%s=%s: want a positive number of clients", child, num)
		}
		if _, dup := c.m[child]; dup {
			return fmt.Errorf("child %q is given twice", child)
		}
		if _, dup := add[child]; dup {
			return fmt.Errorf("child %q is given twice", child)
		}
		add[child] = n
	}
	if c.m == nil {
		c.m = map[string]int64{}
	}
	maps.Copy(c.m, add)
	return nil
}
