package leader

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/replica"
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

// FillElection fills a replica's election options with their defaults, or
// says (naming service) what is wrong with them: when the replica is
// made, not when it first campaigns.
func FillElection(service string, e *replica.Election) error {
	filled, err := e.WithDefaults()
	if err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	*e = filled
	return nil
}

// FillClockSkew fills a server's clock skew, the most its clock may
// differ from its peers': 0 is def, -1 (the services' NoClockSkew) is
// none, any other negative is an error naming service.
func FillClockSkew(service string, skew *time.Duration, def time.Duration) error {
	switch {
	case *skew == 0:
		*skew = def
	case *skew == -1:
		*skew = 0
	case *skew < 0:
		return fmt.Errorf("%s: clock skew %v is negative", service, *skew)
	}
	return nil
}

// FillTerm fills the defaults every term's server has alike: term 1 (a
// server run without the election), slog.Default() and the wall clock.
func FillTerm(term *uint64, log **slog.Logger, now *func() time.Time) {
	if *term == 0 {
		*term = 1
	}
	if *log == nil {
		*log = slog.Default()
	}
	if *now == nil {
		*now = time.Now
	}
}
