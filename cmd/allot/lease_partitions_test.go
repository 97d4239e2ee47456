package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/subjects"
)

// `allot up --lease-partitions 2` serves both partitions: `allot get` on
// the plain subject is answered for resources of either (partition 0
// relays), `allot status` lists each partition's leader, and /metrics
// reports each partition's leader and the resources of both (they once
// showed only the partition of the highest term).
func TestUpLeasePartitions(t *testing.T) {
	ctx := context.Background()
	up := startUp(t, "--data-dir", t.TempDir(), "--lease-partitions", "2", "--quota-serve", "none", "--metrics-addr", "127.0.0.1:0")
	ids := map[int]string{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		if p := subjects.LeasePartition(id, 2); ids[p] == "" {
			ids[p] = id
		}
	}
	for p, id := range ids {
		var out syncBuffer
		if code := run(ctx, testEnv(&out), []string{"get", "--nats", up.url, id, "--wants", "1", "--client", "t1"}); code != 0 ||
			!strings.Contains(out.String(), `"capacity": 1`) {
			t.Fatalf("get %s (partition %d) exited %d: %s", id, p, code, out.String())
		}
	}
	statusUntil(t, func(code int, out string) string {
		if code != 0 || !strings.Contains(out, "LEASE PARTITIONS") || !strings.Contains(out, "0 of 2") || !strings.Contains(out, "1 of 2") {
			return "status does not list both lease partitions:\n" + out
		}
		return ""
	}, "--nats", up.url)
	base := up.opsURL(t)
	poll.For(t, 15*time.Second, 100*time.Millisecond, func() error {
		fams := scrapeMetrics(t, base)
		for p, id := range ids {
			part := strconv.Itoa(p)
			if v, ok := metricValue(fams, "allot_coordinator_leader", map[string]string{"node": "root", "partition": part}); v != 1 {
				return fmt.Errorf("allot_coordinator_leader of partition %s = %v (%v), want 1", part, v, ok)
			}
			if v, _ := metricValue(fams, "allot_coordinator_requests_total", map[string]string{"node": "root", "partition": part, "subject": "capacity.get"}); v < 1 {
				return fmt.Errorf("capacity.get requests of partition %s = %v", part, v)
			}
			if v, ok := metricValue(fams, "allot_resource_outstanding", map[string]string{"node": "root", "resource": id}); v != 1 {
				return fmt.Errorf("outstanding of %s (partition %s) = %v (%v), want 1", id, part, v, ok)
			}
		}
		return nil
	})
}

// Bad partition flags are refused before anything starts.
func TestLeasePartitionFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--lease-partitions", "0"},
		{"--lease-partitions", "257"},
		{"--lease-partitions", "4", "--lease-serve", "4"},
		{"--lease-serve", "x"},
		{"--lease-serve", "1"}, // of one partition
	} {
		var out syncBuffer
		code := run(context.Background(), testEnv(&out), append([]string{"coordinator", "--nats", "nats://127.0.0.1:1"}, args...))
		if code == 0 || !strings.Contains(out.String(), "lease") {
			t.Errorf("%v: exit %d, %s", args, code, out.String())
		}
	}
}
