// Package statekv opens a node's state bucket (allot_state), which the
// coordinators' lease records and the domain-limits service's staged
// transfers and seal key share. Whichever service reaches it first
// creates it, so both create it here, alike: file storage, the history
// the lease records need, and the replica count of the level's buckets.
package statekv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/allot/allot/internal/jsretry"
	"github.com/allot/allot/internal/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the state bucket's default name.
const DefaultBucket = subjects.StateBucket

// History is how many revisions of each key the bucket keeps: a
// coordinator's successor compares the latest lease record with the one
// before it (see ledger.Plausible).
const History = 5

// Open opens the state bucket name, creating it with replicas replicas
// (at least 1) if it does not exist; created reports that this call
// created it. An existing bucket keeps its replicas and storage (an
// operator may have scaled it); only a history below 2, left by an older
// allot, is raised, and a failure to raise it is logged to log.
func Open(ctx context.Context, js jetstream.JetStream, name string, replicas int, log *slog.Logger) (kv jetstream.KeyValue, created bool, err error) {
	// JetStream may not be ready yet (a fresh cluster electing its meta
	// leader): such failures are retried until ctx ends.
	err = jsretry.Do(ctx, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket:      name,
				Description: "allot state: lease records per node, the domain services' staged transfers and seal keys",
				History:     History,
				Storage:     jetstream.FileStorage,
				Replicas:    max(replicas, 1),
			})
			created = err == nil
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(ctx, name) // created meanwhile by another service
			}
		}
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("state bucket %q: %w", name, err)
	}
	if !created {
		keepHistory(ctx, js, kv, name, log)
	}
	return kv, created, nil
}

// keepHistory raises the history of a bucket created by an older version
// (history 1); its other settings stay as they are.
func keepHistory(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, name string, log *slog.Logger) {
	st, err := kv.Status(ctx)
	if err != nil || st.History() >= 2 {
		return
	}
	cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	cfg.MaxMsgsPerSubject = History
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		log.Warn("cannot raise the state bucket's history; a successor cannot compare a lease record with the one before it", "bucket", name, "err", err)
	}
}
