package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/proto/allotpb"
)

// A node's resources are spread over N lease partitions by a hash mod N,
// so changing N moves resources between partitions, and a partition's
// record speaks only for the resources it owned when it was written. The
// state bucket key <node>.lease-partitions says the N the node serves
// under and whether it changed: the first partition that takes over under
// a new N writes it (compare-and-set), and a record of a revision below
// that write was written under an older number. A partition whose own
// record is that old, or that has none, learns until every record of the
// older numbers has passed its horizon.

// partitionsState is the value of the node's lease-partitions key.
type partitionsState struct {
	Partitions int `json:"partitions"`
	// Changed says the node served under another number before this one
	// (the key's revision then marks the change).
	Changed bool `json:"changed,omitempty"`
}

// partitioningView is what a taking-over partition knows of its node's
// partitioning: changedAt is the revision below which the node's records
// were written under another number (0: none were).
type partitioningView struct {
	changedAt uint64
}

// partitions is the node's number of lease partitions.
func (s *recordStore) partitions() int { return max(s.opts.Partitions, 1) }

// partitioning reads the node's lease-partitions key, writing it when it
// is missing or names another number. created says this takeover created
// the state bucket (so it holds nothing).
func (s *recordStore) partitioning(ctx context.Context, created bool) (partitioningView, error) {
	key := subjects.LeasePartitionsKey(s.opts.Node)
	for attempt := 0; ; attempt++ {
		var st partitionsState
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case err == nil:
			if json.Unmarshal(e.Value(), &st) != nil {
				st = partitionsState{} // unreadable: the number is unknown
			}
			rev = e.Revision()
			if st.Partitions == s.partitions() {
				if st.Changed {
					return partitioningView{changedAt: rev}, nil
				}
				return partitioningView{}, nil
			}
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return partitioningView{}, fmt.Errorf("coordinator: read %s: %w", key, err)
		}
		// Missing (a new node, or one whose records predate the key) or
		// another number. It changed if the key said so, or if a record
		// of another number is left.
		changed := rev > 0
		if !changed && !created {
			other, err := s.otherNumber(ctx)
			if err != nil {
				return partitioningView{}, err
			}
			changed = other != ""
		}
		data, _ := json.Marshal(partitionsState{Partitions: s.partitions(), Changed: changed})
		var nrev uint64
		if rev == 0 {
			nrev, err = s.kv.Create(ctx, key, data)
		} else {
			nrev, err = s.kv.Update(ctx, key, data, rev)
		}
		switch {
		case err == nil && changed:
			s.log.Warn("the node's number of lease partitions changed: records written before are of another partitioning",
				"was", st.Partitions, "partitions", s.partitions())
			return partitioningView{changedAt: nrev}, nil
		case err == nil:
			return partitioningView{}, nil
		case !isMismatch(err) || attempt == 3:
			return partitioningView{}, fmt.Errorf("coordinator: write %s: %w", key, err)
		}
		// Another partition wrote it first: read it again.
	}
}

// recordPartitions is the number of lease partitions rec, stored under
// key, was written under. A record that does not say is taken to be of
// the number its key implies (one for <node>.leases, n for a partition's
// key): records predating the field were written before a node could
// change its number safely.
func recordPartitions(key string, rec *allotpb.LeaseHorizon, n int) int {
	switch {
	case rec.GetPartitions() > 0:
		return int(rec.GetPartitions())
	case strings.HasSuffix(key, ".leases"):
		return 1
	}
	return max(n, 2)
}

// nodeRecords calls f with every lease record of the node (key, entry).
func (s *recordStore) nodeRecords(ctx context.Context, f func(key string, e jetstream.KeyValueEntry) error) error {
	base := subjects.LeaseRecordKey(s.opts.Node, 0, 1)
	lister, err := s.kv.ListKeysFiltered(ctx, base, base+".*")
	if err != nil {
		return fmt.Errorf("coordinator: list the node's lease records: %w", err)
	}
	defer lister.Stop()
	for key := range lister.Keys() {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("coordinator: read lease record %s: %w", key, err)
		}
		if err := f(key, e); err != nil {
			return err
		}
	}
	// The lister stops early, without an error, when ctx ends.
	return ctx.Err()
}

// otherNumber returns the key of a record of the node written under
// another number of lease partitions (an unreadable one counts), if any.
func (s *recordStore) otherNumber(ctx context.Context) (string, error) {
	var other string
	err := s.nodeRecords(ctx, func(key string, e jetstream.KeyValueEntry) error {
		var h allotpb.LeaseHorizon
		if other == "" && (protojson.Unmarshal(e.Value(), &h) != nil || recordPartitions(key, &h, s.partitions()) != s.partitions()) {
			other = key
		}
		return nil
	})
	return other, err
}

// repartitionedPrior is what a partition takes over from when its own
// record predates the node's change of partitioning, or it has none: the
// latest horizon of the node's records, as an incomplete record that
// lists no resource, so that every resource learns until then (at most
// learning_mode_duration) and not at all once it has passed. Every record
// counts, those of the current number too: a partition that took over
// after the change overwrote a record of the old number with its own,
// whose horizon carries the old one's forward (it learned until then).
// An unreadable record means the worst.
func (s *recordStore) repartitionedPrior(ctx context.Context, why string) (ledger.Prior, error) {
	var horizon time.Time
	damaged := ""
	err := s.nodeRecords(ctx, func(key string, e jetstream.KeyValueEntry) error {
		var h allotpb.LeaseHorizon
		if protojson.Unmarshal(e.Value(), &h) != nil || h.GetHorizon() == nil {
			damaged = key
			return nil
		}
		if t := h.GetHorizon().AsTime(); t.After(horizon) {
			horizon = t
		}
		return nil
	})
	if err != nil {
		return ledger.Prior{}, err
	}
	if damaged != "" {
		s.log.Warn(why+"; a record of the earlier partitioning is unreadable: learning as after an unknown predecessor", "record", damaged)
		return ledger.Prior{Kind: ledger.PriorMissing}, nil
	}
	s.log.Warn(why+": learning until the earlier partitioning's leases have ended", "horizon", horizon, "partitions", s.partitions())
	return ledger.Prior{Kind: ledger.PriorRecord, Record: &allotpb.LeaseHorizon{
		Node: s.opts.Node, Horizon: timestamppb.New(horizon),
	}}, nil
}
