package leader

import (
	"fmt"
	"os"

	"github.com/allot/allot/internal/subjects"
)

// FillPartition fills and checks what identifies one replica of a
// partitioned service (service names it in errors: "quotaserver"): the
// node (default "root", 1 to 64 of [A-Za-z0-9_-]), the server id (default
// host:pid), the partition count (default 1, at most maxPartitions) and
// the partition.
func FillPartition(service string, node, serverID *string, partition int, partitions *int, maxPartitions int) error {
	if err := FillNode(service, node, serverID); err != nil {
		return err
	}
	if *partitions == 0 {
		*partitions = 1
	}
	if *partitions < 1 || *partitions > maxPartitions {
		return fmt.Errorf("%s: %d partitions: want 1 to %d", service, *partitions, maxPartitions)
	}
	if partition < 0 || partition >= *partitions {
		return fmt.Errorf("%s: partition %d: want 0 to %d", service, partition, *partitions-1)
	}
	return nil
}

// FillNode fills and checks the node (default "root") and the server id
// (default host:pid) of a replica.
func FillNode(service string, node, serverID *string) error {
	if *node == "" {
		*node = "root"
	}
	if err := subjects.ValidateNode(*node); err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	if *serverID == "" {
		host, _ := os.Hostname()
		*serverID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return nil
}
