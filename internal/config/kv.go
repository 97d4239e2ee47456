package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Names in the configuration bucket.
const (
	// DefaultBucket is the KV bucket that holds resource templates.
	DefaultBucket = "allot_config"
	// KeyPrefix starts every template key: "templates.<name>".
	KeyPrefix = "templates."
	// WatchPattern matches every template key.
	WatchPattern = KeyPrefix + ">"
	// DefaultTemplateName is the conventional name of the lowest-precedence
	// template, stored under "templates.default" with glob "*".
	DefaultTemplateName = "default"
	// BucketHistory is how many revisions per key the bucket keeps, for
	// `allot config history`.
	BucketHistory = 10
)

// Key returns the KV key of template name.
func Key(name string) string { return KeyPrefix + name }

// NameFromKey returns the template name of a key, and false if the key is
// not a template key.
func NameFromKey(key string) (string, bool) {
	name, ok := strings.CutPrefix(key, KeyPrefix)
	return name, ok && name != ""
}

// OpenBucket returns the configuration bucket. With create, a missing
// bucket is created (file storage, BucketHistory revisions per key); an
// existing bucket is used as it is.
func OpenBucket(ctx context.Context, js jetstream.JetStream, bucket string, create bool) (jetstream.KeyValue, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err == nil {
		return kv, nil
	}
	if !create || !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open configuration bucket %q: %w", bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "allot resource templates, one per key templates.<name>",
		History:     BucketHistory,
		Storage:     jetstream.FileStorage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) { // lost a race with another creator
		kv, err = js.KeyValue(ctx, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("create configuration bucket %q: %w", bucket, err)
	}
	return kv, nil
}

// Entry is one template key as read from the bucket by LoadAll.
type Entry struct {
	// Name is the template name, Key the KV key.
	Name, Key string
	// Revision is the KV revision of the value.
	Revision uint64
	// Value is the stored document.
	Value []byte
	// Template is the compiled template, nil if Err is set.
	Template *Template
	// Notes are Compile's normalization notes.
	Notes []string
	// Err is why the value was rejected.
	Err error
}

// LoadAll reads every template key of kv and compiles it. Invalid values
// are returned with Err set, not as an error.
func LoadAll(ctx context.Context, kv jetstream.KeyValue) ([]Entry, error) {
	w, err := kv.Watch(ctx, WatchPattern, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read template keys: %w", err)
	}
	defer w.Stop()
	var out []Entry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("read template keys: watcher closed")
			}
			if e == nil { // initial values done
				slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
				return out, nil
			}
			out = append(out, compileEntry(e))
		case <-ctx.Done():
			return nil, fmt.Errorf("read template keys: %w", ctx.Err())
		}
	}
}

func compileEntry(e jetstream.KeyValueEntry) Entry {
	out := Entry{Key: e.Key(), Revision: e.Revision(), Value: e.Value()}
	name, ok := NameFromKey(e.Key())
	if !ok {
		out.Err = fmt.Errorf("key %q is not of the form %s<name>", e.Key(), KeyPrefix)
		return out
	}
	out.Name = name
	out.Template, out.Notes, out.Err = ParseAndCompile(name, e.Revision(), e.Value())
	return out
}

// SetFromEntries builds a Set (generation 0) from the valid entries.
func SetFromEntries(entries []Entry, fallback *Template) *Set {
	var ts []*Template
	for _, e := range entries {
		if e.Template != nil {
			ts = append(ts, e.Template)
		}
	}
	return NewSet(0, ts, fallback)
}

// SeedTemplates stores each template file of dir (top level, *.json,
// *.yaml, *.yml; the file name without extension is the template name)
// under its key unless the key already exists, so operator edits are
// never overwritten: a key with any history, including a delete, is left
// alone, so a template the operator deleted stays deleted. Every file is
// validated first; if any is invalid nothing is written. It returns the
// names it stored.
func SeedTemplates(ctx context.Context, kv jetstream.KeyValue, dir fs.FS) ([]string, error) {
	files, err := fs.ReadDir(dir, ".")
	if err != nil {
		return nil, fmt.Errorf("read template directory: %w", err)
	}
	type seed struct {
		name string
		data []byte
	}
	var seeds []seed
	for _, f := range files {
		ext := path.Ext(f.Name())
		if f.IsDir() || (ext != ".json" && ext != ".yaml" && ext != ".yml") {
			continue
		}
		name := strings.TrimSuffix(f.Name(), ext)
		data, err := fs.ReadFile(dir, f.Name())
		if err != nil {
			return nil, fmt.Errorf("read template %s: %w", f.Name(), err)
		}
		if _, _, err := ParseAndCompile(name, 0, data); err != nil {
			return nil, fmt.Errorf("template %s: %w", f.Name(), err)
		}
		seeds = append(seeds, seed{name, data})
	}
	var stored []string
	for _, s := range seeds {
		_, err := kv.History(ctx, Key(s.name))
		if err == nil {
			continue // exists, or existed and was deleted by an operator
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return stored, fmt.Errorf("seed template %s: %w", s.name, err)
		}
		_, err = kv.Create(ctx, Key(s.name), s.data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return stored, fmt.Errorf("seed template %s: %w", s.name, err)
		}
		stored = append(stored, s.name)
	}
	return stored, nil
}
