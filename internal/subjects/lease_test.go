package subjects

import (
	"hash/fnv"
	"strconv"
	"testing"
)

// The vectors of subjects.md, "Lease partitions": FNV-1a 32 of the id's
// bytes, and the partition of 2, 4 and 7.
var leaseVectors = []struct {
	id         string
	hash       uint32
	p2, p4, p7 int
}{
	{"", 0x811c9dc5, 1, 1, 2},
	{"a", 0xe40c292c, 0, 0, 5},
	{"api", 0x386aaa87, 1, 3, 5},
	{"orders", 0x325e96ec, 0, 0, 3},
	{"tenant-42/search", 0xc5727817, 1, 3, 4},
	{"r-0", 0xfc69ccc8, 0, 0, 1},
	{"r-1", 0xfd69ce5b, 1, 3, 6},
	{"r-999", 0xd7c5f415, 1, 1, 3},
	{"é", 0x1e9de8c1, 1, 1, 2},
}

func TestLeasePartitionVectors(t *testing.T) {
	for _, v := range leaseVectors {
		h := fnv.New32a()
		h.Write([]byte(v.id))
		if got := h.Sum32(); got != v.hash {
			t.Errorf("fnv32a(%q) = %#08x, the table says %#08x", v.id, got, v.hash)
		}
		for n, want := range map[int]int{1: 0, 2: v.p2, 4: v.p4, 7: v.p7} {
			if got := LeasePartition(v.id, n); got != want {
				t.Errorf("LeasePartition(%q, %d) = %d, want %d", v.id, n, got, want)
			}
		}
	}
}

// Over many ids each of n partitions owns about 1/n of them.
func TestLeasePartitionSpreads(t *testing.T) {
	const ids, n = 10000, 4
	var count [n]int
	for i := range ids {
		count[LeasePartition("r-"+strconv.Itoa(i), n)]++
	}
	for p, c := range count {
		if c < ids/n*9/10 || c > ids/n*11/10 {
			t.Errorf("partition %d owns %d of %d ids", p, c, ids)
		}
	}
}

func TestLeaseNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{LeaseSubject("root", "capacity.get", 0, 1), "allot.root.capacity.get"},
		{LeaseSubject("root", "server.get.eu", 0, 1), "allot.root.server.get.eu"},
		{LeaseSubject("root", "capacity.refresh", 2, 4), "allot.root.capacity.p.2.refresh"},
		{LeaseSubject("root", "server.get", 3, 4), "allot.root.server.p.3.get"},
		{LeaseSubject("root", "server.get.eu", 1, 4), "allot.root.server.p.1.get.eu"},
		{LeaseElectionKey("root", 0, 1), "root"},
		{LeaseElectionKey("root", 3, 4), "root.lease.3"},
		{LeaseRecordKey("root", 0, 1), "root.leases"},
		{LeaseRecordKey("root", 1, 4), "root.leases.1"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
