package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
)

// startPartitions starts n coordinators of node, one per lease
// partition, each on a connection of its own.
func startPartitions(t *testing.T, urlConn func() *nats.Conn, node, parent string, n int) {
	t.Helper()
	for p := range n {
		coordtest.Start(t, urlConn(), coordinator.Options{Node: node, Parent: parent, Partition: p, Partitions: n,
			Templates: treeTemplates(100), ClockSkew: coordinator.NoClockSkew})
	}
}

// ask sends a JSON request on subject and returns the reply.
func ask(t *testing.T, nc *nats.Conn, subject, body string) *nats.Msg {
	t.Helper()
	m, err := nc.Request(subject, []byte(body), answerWithin)
	if err != nil {
		t.Fatalf("%s %s: %v", subject, body, err)
	}
	return m
}

// grants decodes a JSON GetCapacity reply: resource → capacity, in order.
func grants(t *testing.T, m *nats.Msg) ([]string, []float64) {
	t.Helper()
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("%s: error %s: %s", m.Subject, code, m.Header.Get("Nats-Service-Error"))
	}
	var resp struct {
		Response []struct {
			ResourceID string `json:"resource_id"`
			Error      string `json:"error"`
			Gets       struct {
				Capacity float64 `json:"capacity"`
			} `json:"gets"`
		} `json:"response"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		t.Fatalf("reply %s: %v", m.Data, err)
	}
	var ids []string
	var caps []float64
	for _, r := range resp.Response {
		if r.Error != "" {
			t.Fatalf("resource %s refused: %s", r.ResourceID, r.Error)
		}
		ids, caps = append(ids, r.ResourceID), append(caps, r.Gets.Capacity)
	}
	return ids, caps
}

func getBody(client string, ids ...string) string {
	var rs []string
	for _, id := range ids {
		rs = append(rs, fmt.Sprintf(`{"resource_id":%q,"wants":10}`, id))
	}
	return fmt.Sprintf(`{"client_id":%q,"resource":[%s]}`, client, strings.Join(rs, ","))
}

// With three lease partitions each serves its own resources on its own
// subjects and says how many partitions there are; a resource sent to
// another partition is refused whole with 421 naming its owner; the
// node's plain subjects still serve any resources (partition 0 relays);
// each partition keeps its own lease record.
func TestLeasePartitionsServeTheirOwn(t *testing.T) {
	const n = 3
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	startPartitions(t, func() *nats.Conn { return natstest.Conn(t, s) }, "root", "", n)

	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprint("r-", i))
	}
	for _, id := range ids {
		p := subjects.LeasePartition(id, n)
		m := ask(t, nc, subjects.LeaseSubject("root", "capacity.get", p, n), getBody("own", id))
		if got, caps := grants(t, m); len(got) != 1 || got[0] != id || caps[0] != 10 {
			t.Fatalf("partition %d for %s: %v %v", p, id, got, caps)
		}
		if h := m.Header.Get(wire.HeaderLeasePartitions); h != "3" {
			t.Fatalf("partition %d's reply says %s: %q, want 3", p, wire.HeaderLeasePartitions, h)
		}
		wrong := (p + 1) % n
		m = ask(t, nc, subjects.LeaseSubject("root", "capacity.get", wrong, n), getBody("wrong", "r-x-"+id, id))
		if code, text := m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error"); code != "421" ||
			!strings.Contains(text, fmt.Sprintf("lease partition %d of 3", subjects.LeasePartition(id, n))) &&
				!strings.Contains(text, fmt.Sprintf("lease partition %d of 3", subjects.LeasePartition("r-x-"+id, n))) {
			t.Fatalf("%s at partition %d: code %q, %q", id, wrong, code, text)
		}
	}

	// The plain subject: every resource granted, in request order.
	m := ask(t, nc, coordinator.Subject("root", "capacity.get"), getBody("plain", ids...))
	got, caps := grants(t, m)
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("relayed reply lists %v, want %v", got, ids)
	}
	for i, c := range caps {
		if c != 10 {
			t.Fatalf("relayed %s got %v, want 10", got[i], c)
		}
	}
	if h := m.Header.Get(wire.HeaderLeasePartitions); h != "3" {
		t.Fatalf("relayed reply says %s: %q", wire.HeaderLeasePartitions, h)
	}
	m = ask(t, nc, coordinator.Subject("root", "capacity.release"), fmt.Sprintf(`{"client_id":"plain","resource_id":["%s"]}`, strings.Join(ids, `","`)))
	var rel struct {
		Released int `json:"released"`
	}
	if err := json.Unmarshal(m.Data, &rel); err != nil || rel.Released != len(ids) {
		t.Fatalf("relayed release: %s (%v), want %d released", m.Data, err, len(ids))
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), coordinator.DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	for p := range n {
		key := subjects.LeaseRecordKey("root", p, n)
		poll.Until(t, 10*time.Second, "lease record "+key, func() bool {
			_, err := kv.Get(context.Background(), key)
			return err == nil
		})
	}
}

// A child node (one partition) under a root of three: its clients get
// capacity for resources of every root partition, through the root's
// plain server.get (partition 0 relays).
func TestChildUnderLeasePartitions(t *testing.T) {
	root := natstest.Root(t, "root")
	child := natstest.Child(t, "child", root)
	startPartitions(t, func() *nats.Conn { return natstest.Conn(t, root.Server) }, "root", "", 3)
	rnc := natstest.Conn(t, root.Server)
	direct, err := rnc.SubscribeSync("allot.root.server.p.*.get.child")
	if err != nil {
		t.Fatal(err)
	}
	cnc := natstest.Conn(t, child.Server)
	coordtest.Start(t, cnc, coordinator.Options{Node: "child", Parent: "root", Templates: treeTemplates(100)})

	ids := []string{"r-0", "r-1", "r-2", "r-3", "r-4", "r-5"}
	seen := map[int]bool{}
	for _, id := range ids {
		seen[subjects.LeasePartition(id, 3)] = true
	}
	if len(seen) < 2 {
		t.Fatalf("test ids cover partitions %v only", seen)
	}
	poll.Until(t, 20*time.Second, "the child's client granted every resource", func() bool { return grantedAll(cnc, "child", ids) })
	// Told the root's partitions, the child asks each for its own.
	seenParts := map[string]bool{}
	poll.Until(t, 20*time.Second, "the child asking the root's partitions directly", func() bool {
		for {
			m, err := direct.NextMsg(10 * time.Millisecond)
			if err != nil {
				break
			}
			seenParts[m.Subject] = true
		}
		return len(seenParts) >= len(seen)
	})
}

// A partition counts its calls under the node's endpoints, so that
// metrics keep their labels.
func TestLeasePartitionCallsCounted(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	c := coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{Node: "root", Partition: 1, Partitions: 2, Templates: treeTemplates(100)})
	id := ownedBy(1, 2)
	grants(t, ask(t, nc, subjects.LeaseSubject("root", "capacity.get", 1, 2), getBody("counted", id)))
	poll.Until(t, 10*time.Second, "the get counted as capacity.get", func() bool {
		for _, call := range c.Observe().Calls {
			if call.Subject == "capacity.get" && call.Code == 0 && call.N > 0 {
				return true
			}
		}
		return false
	})
}

// ownedBy returns a resource id that partition p of n owns.
func ownedBy(p, n int) string {
	for i := 0; ; i++ {
		if id := fmt.Sprint("owned-", i); subjects.LeasePartition(id, n) == p {
			return id
		}
	}
}

// A child of two lease partitions under a root of three: each child
// partition asks the root's partitions for its own resources, and the
// child's clients get every resource.
func TestPartitionedChildUnderPartitionedRoot(t *testing.T) {
	root := natstest.Root(t, "root")
	child := natstest.Child(t, "child", root)
	startPartitions(t, func() *nats.Conn { return natstest.Conn(t, root.Server) }, "root", "", 3)
	startPartitions(t, func() *nats.Conn { return natstest.Conn(t, child.Server) }, "child", "root", 2)
	cnc := natstest.Conn(t, child.Server)
	ids := []string{"r-0", "r-1", "r-2", "r-3", "r-4", "r-5", "r-6", "r-7"}
	poll.Until(t, 20*time.Second, "the child's client granted every resource", func() bool { return grantedAll(cnc, "child", ids) })
}

// grantedAll reports whether a client of node asking on its plain
// subject is granted 10 of every resource of ids.
func grantedAll(nc *nats.Conn, node string, ids []string) bool {
	m, err := nc.Request(coordinator.Subject(node, "capacity.get"), []byte(getBody("c", ids...)), 5*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		return false
	}
	var resp struct {
		Response []struct {
			Gets struct {
				Capacity float64 `json:"capacity"`
			} `json:"gets"`
		} `json:"response"`
	}
	if json.Unmarshal(m.Data, &resp) != nil || len(resp.Response) != len(ids) {
		return false
	}
	for _, r := range resp.Response {
		if r.Gets.Capacity != 10 {
			return false
		}
	}
	return true
}
