package coordinator

import (
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/reply"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
)

// CodeMisdirected answers a request sent to a lease partition that does
// not own one of its resources (HTTP's 421 Misdirected Request): nothing
// of it is granted, and the error names the owner's subject.
const CodeMisdirected = 421

// leaseSubject is the subject this coordinator serves endpoint on: the
// node's plain subject with one partition, its partition's otherwise
// (subjects.LeaseSubject).
func (c *Coordinator) leaseSubject(endpoint string) string {
	return subjects.LeaseSubject(c.opts.Node, endpoint, c.opts.Partition, c.opts.Partitions)
}

// tenantLeaseSubject is leaseSubject as tenant's requests arrive through
// its service import: allot.t.<tenant>.<rest after "allot.">.
func (c *Coordinator) tenantLeaseSubject(tenant, endpoint string) string {
	return subjects.Tenant(tenant, c.leaseSubject(endpoint))
}

// partitioned reports whether the node's resources are spread over more
// than one lease partition.
func (c *Coordinator) partitioned() bool { return c.opts.Partitions > 1 }

// partitionsMeta is what the micro service's metadata says of partitions:
// nothing with one (as before partitions existed).
func (c *Coordinator) partitionsMeta() int {
	if !c.partitioned() {
		return 0
	}
	return c.opts.Partitions
}

func (c *Coordinator) description() string {
	d := "allot coordinator: capacity leases for node " + c.opts.Node
	if c.partitioned() {
		d += ", lease partition " + strconv.Itoa(c.opts.Partition) + " of " + strconv.Itoa(c.opts.Partitions)
	}
	return d
}

// endpoints are the subjects the coordinator serves.
//
// Get and release share one subscription so that one client's requests
// are handled in the order they were sent. A holder's refresh
// (capacity.refresh) has a subscription of its own, on a connection of
// its own (Options.Beside), which a flood of newcomers' gets never
// fills: the wildcard's subscription leaves it alone. A tenant's requests
// arrive on allot.t.<tenant>.<node>.capacity.* through its account's
// service import: one subscription for all tenants (and one for their
// refreshes), so each client's get and release keep their order. Never
// server.get: child nodes are coordinators inside the allot account. A
// plain subscription, not a micro endpoint: the handler needs the message
// (handleTenantMsg). Every endpoint is Deferred: the round loop answers,
// and finishes, its requests (publish).
//
// With lease partitions, each serves the same on its own subjects
// (allot.<node>.capacity.p.<i>.*, …), and partition 0 also serves the
// node's plain subjects, passing each part of a request on to its owner
// (relay.go).
func (c *Coordinator) endpoints() []leader.Endpoint {
	size := wire.CheckSize
	refresh := func(subject string) bool { return strings.HasSuffix(subject, ".capacity.refresh") }
	eps := []leader.Endpoint{
		// The capacity endpoints decode small requests and queue them for
		// the round loop, which orders them by class (takeBatch): no lane.
		{Name: "capacity", Subject: c.leaseSubject("capacity.*"), Handle: c.handleCapacity, CheckSize: size, Deferred: true, Ignore: refresh, Inline: true},
		{Subject: c.leaseSubject("capacity.refresh"), Plain: true, Beside: true, Handle: c.handleCapacity, CheckSize: size, Deferred: true, Inline: true},
		{Name: "server_get", Subject: c.leaseSubject("server.get"), Handle: c.handleServerGet, CheckSize: size, Deferred: true},
		{Name: "server_get_child", Subject: c.leaseSubject("server.get.*"), Handle: c.handleServerGet, CheckSize: size, Deferred: true},
		{Subject: c.tenantLeaseSubject("*", "capacity.*"), Plain: true, Handle: c.handleTenantMsg, CheckSize: size, Deferred: true,
			Tenant: subjects.TenantOf, Ignore: refresh, Inline: true},
		{Subject: c.tenantLeaseSubject("*", "capacity.refresh"), Plain: true, Beside: true, Handle: c.handleTenantMsg, CheckSize: size,
			Deferred: true, Tenant: subjects.TenantOf, Inline: true},
	}
	if c.partitioned() && c.opts.Partition == 0 {
		node := c.opts.Node
		eps = append(eps,
			leader.Endpoint{Name: "relay_capacity", Subject: Subject(node, "capacity.*"), Handle: c.handleRelay, CheckSize: size, Deferred: true},
			leader.Endpoint{Name: "relay_server_get", Subject: Subject(node, "server.get"), Handle: c.handleRelay, CheckSize: size, Deferred: true},
			leader.Endpoint{Name: "relay_server_get_child", Subject: Subject(node, "server.get.*"), Handle: c.handleRelay, CheckSize: size, Deferred: true},
			leader.Endpoint{Subject: TenantSubject("*", node, "capacity.*"), Plain: true, Handle: c.handleRelay, CheckSize: size, Deferred: true,
				Tenant: subjects.TenantOf},
		)
	}
	return eps
}

// misdirected returns, with lease partitions, the error text of a request
// naming a resource of another partition ("" if this one owns them all).
func (c *Coordinator) misdirected(n int, id func(k int) string) string {
	if !c.partitioned() {
		return ""
	}
	for k := range n {
		if p := subjects.LeasePartition(id(k), c.opts.Partitions); p != c.opts.Partition {
			return "resource " + strconv.Quote(id(k)) + " belongs to lease partition " + strconv.Itoa(p) + " of " +
				strconv.Itoa(c.opts.Partitions) + " (" + subjects.LeaseSubject(c.opts.Node, "capacity.get", p, c.opts.Partitions) +
				"), not to partition " + strconv.Itoa(c.opts.Partition) + ": send each partition its own resources (subjects.md, \"Lease partitions\")"
		}
	}
	return ""
}

// refuseMisdirected answers a misdirected request with 421, its text and
// the partition count, from the handler's goroutine.
func (c *Coordinator) refuseMisdirected(m micro.Request, enc wire.Encoding, text string) {
	c.countCall(m.Subject(), CodeMisdirected)
	c.publish(m, reply.ErrorMsg(m.Reply(), enc, CodeMisdirected, text))
}

// partitionsHeader adds the partition count to a reply's headers when
// the node has partitions, so that clients learn to split their requests.
func (c *Coordinator) partitionsHeader(out *nats.Msg) {
	if !c.partitioned() || out.Header.Get(wire.HeaderLeasePartitions) != "" {
		return
	}
	if out.Header == nil {
		out.Header = nats.Header{}
	}
	out.Header.Set(wire.HeaderLeasePartitions, strconv.Itoa(c.opts.Partitions))
}
