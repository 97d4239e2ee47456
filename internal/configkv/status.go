package configkv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/allot/allot/internal/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// Verdicts: what a watcher found of each configuration key, written for
// operators who have only the nats CLI. `nats kv put allot_config …`
// cannot say whether allot took the value; the watcher writes its
// verdict under StatusKey in the node's state bucket (allot_state), where
// `nats kv get` and `nats kv watch` show it. The state bucket, not the
// configuration bucket: coordinators may not write allot_config (only
// the operator does, and below the root it is a read-only mirror), and
// its revisions stay the operator's own puts.

// StatusKeyInfix separates the node from the configuration key in a
// verdict's key: "<node>.config.<key>".
const StatusKeyInfix = subjects.ConfigStatusInfix

// StatusKey returns the state-bucket key of the verdict on configuration
// key at node: "<node>.config.<key>" ("root.config.templates.db").
func StatusKey(node, key string) string { return subjects.ConfigStatusKey(node, key) }

// Verdict is a watcher's verdict on the newest revision of one key of the
// configuration bucket, as written under StatusKey (JSON). It depends
// only on the bucket's contents, so every replica writes the same bytes.
type Verdict struct {
	// Key and Revision are the configuration key and the revision judged.
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	// OK says the revision was applied.
	OK bool `json:"ok"`
	// Errors are every problem of a rejected revision, or why a key is
	// not allot's configuration.
	Errors []string `json:"errors,omitempty"`
	// Notes are the normalizations applied to an applied revision.
	Notes []string `json:"notes,omitempty"`
	// State says what the key serves ("ok", "serving revision N because
	// revision M is invalid: …", why nothing serves, or that the key is
	// ignored).
	State string `json:"state"`
}

// statusTimeout bounds each write of a verdict.
const statusTimeout = 5 * time.Second

// statusWriter writes verdicts to the state bucket, from its own
// goroutine, so that a slow or refused write never holds up the watch.
type statusWriter struct {
	js     jetstream.JetStream
	bucket string
	node   string
	log    *slog.Logger

	mu      sync.Mutex
	pending map[string][]byte // by state key; nil deletes
	warned  bool
	wake    chan struct{}
}

// PublishVerdicts makes the watcher write its verdict on every
// configuration key (Verdict) to the state bucket (js's bucket, created
// by the coordinator) under StatusKey(node, key), and delete the verdicts
// of keys that are gone. Call it before Start. Every replica of a node
// writes the same verdicts: a write is skipped when the stored verdict
// is already the same.
func (w *Watcher) PublishVerdicts(js jetstream.JetStream, stateBucket, node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.verdicts = &statusWriter{js: js, bucket: stateBucket, node: node, log: w.log,
		pending: make(map[string][]byte), wake: make(chan struct{}, 1)}
}

// verdict schedules v to be written (nil: the verdict of key deleted).
// w.mu must be held.
func (w *Watcher) verdict(key string, v *Verdict) {
	sw := w.verdicts
	if sw == nil {
		return
	}
	var data []byte
	if v != nil {
		// Without HTML escapes: read by people ("templates.<name>").
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return // plain strings and numbers: cannot fail
		}
		data = bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	}
	sw.mu.Lock()
	sw.pending[StatusKey(sw.node, key)] = data
	sw.mu.Unlock()
	sw.poke()
}

// knownKeys returns every key of the bucket the watcher has a value of.
func (w *Watcher) knownKeys() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make(map[string]bool, len(w.keys)+len(w.unknown))
	for k := range w.keys {
		keys[k] = true
	}
	for k := range w.unknown {
		keys[k] = true
	}
	return keys
}

func (sw *statusWriter) poke() {
	select {
	case sw.wake <- struct{}{}:
	default:
	}
}

// run writes pending verdicts until ctx ends. known reports, at the
// first write, the configuration keys the watcher has; verdicts stored
// for other keys (deleted while no watcher ran) are deleted.
func (sw *statusWriter) run(ctx context.Context, known func() map[string]bool) {
	var kv jetstream.KeyValue
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sw.wake:
		case <-retry.C:
		}
		if kv == nil {
			var err error
			if kv, err = sw.open(ctx, known); err != nil {
				if errors.Is(err, jetstream.ErrBucketNotFound) {
					// Not yet: the coordinator creates it as it starts.
					sw.log.Debug("state bucket not there yet for configuration verdicts", "err", err)
				} else {
					sw.failed(err)
				}
				retry.Reset(time.Second)
				continue
			}
		}
		sw.mu.Lock()
		batch := sw.pending
		sw.pending = make(map[string][]byte)
		sw.mu.Unlock()
		for key, data := range batch {
			if err := sw.write(ctx, kv, key, data); err != nil {
				if ctx.Err() != nil {
					return
				}
				sw.failed(fmt.Errorf("write %s: %w", key, err))
				sw.mu.Lock()
				if _, newer := sw.pending[key]; !newer {
					sw.pending[key] = data
				}
				sw.mu.Unlock()
				retry.Reset(5 * time.Second)
			}
		}
	}
}

// open opens the state bucket and schedules the deletion of verdicts of
// keys the watcher does not know.
func (sw *statusWriter) open(ctx context.Context, known func() map[string]bool) (jetstream.KeyValue, error) {
	octx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	kv, err := sw.js.KeyValue(octx, sw.bucket)
	if err != nil {
		return nil, fmt.Errorf("open state bucket %q: %w", sw.bucket, err)
	}
	lister, err := kv.ListKeysFiltered(octx, StatusKey(sw.node, ">"))
	if err != nil {
		return nil, fmt.Errorf("list verdicts in %q: %w", sw.bucket, err)
	}
	var stale []string
	keys := known()
	for k := range lister.Keys() {
		if !keys[strings.TrimPrefix(k, sw.node+StatusKeyInfix)] {
			stale = append(stale, k)
		}
	}
	_ = lister.Stop() // its goroutine stops the watch when the list ends
	if err := octx.Err(); err != nil {
		return nil, fmt.Errorf("list verdicts in %q: %w", sw.bucket, err)
	}
	sw.mu.Lock()
	for _, k := range stale {
		if _, ok := sw.pending[k]; !ok {
			sw.pending[k] = nil
		}
	}
	sw.mu.Unlock()
	return kv, nil
}

// write stores data under key (nil: deletes it), unless it is there
// already.
func (sw *statusWriter) write(ctx context.Context, kv jetstream.KeyValue, key string, data []byte) error {
	wctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	e, err := kv.Get(wctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if data == nil {
			return nil
		}
	case err != nil:
		return err
	case data != nil && bytes.Equal(e.Value(), data):
		return nil
	}
	if data == nil {
		return kv.Delete(wctx, key)
	}
	_, err = kv.Put(wctx, key, data)
	return err
}

// failed logs a failed write: the first at Warn, the others at Debug,
// so that a deployment without the rights does not fill the log.
func (sw *statusWriter) failed(err error) {
	sw.mu.Lock()
	first := !sw.warned
	sw.warned = true
	sw.mu.Unlock()
	if first {
		sw.log.Warn("cannot write configuration verdicts for the nats CLI (allot config status still shows them)", "err", err)
		return
	}
	sw.log.Debug("cannot write configuration verdicts", "err", err)
}
