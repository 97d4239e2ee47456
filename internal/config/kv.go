package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"
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
	// `allot config history` and so that a replica that starts after an
	// invalid put finds the last valid revision to serve.
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
	// Serving is, when Err is set, the key's last valid revision before
	// this one (from the key's history): what replicas serve instead. Nil
	// if there is none.
	Serving *Template
	// Refusal is set when Err is set, Serving is nil and the value's
	// identifier_glob can be read: replicas refuse the resources it wins.
	Refusal *Refusal
}

// LoadAll reads every template key of kv and compiles it. Invalid values
// are returned with Err set, not as an error, and with what replicas
// serve in their place (Serving or Refusal).
func LoadAll(ctx context.Context, kv jetstream.KeyValue) ([]Entry, error) {
	w, err := kv.Watch(ctx, WatchPattern, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read template keys: %w", err)
	}
	defer w.Stop()
	var out []Entry
loop:
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("read template keys: watcher closed")
			}
			if e == nil { // initial values done
				break loop
			}
			out = append(out, compileEntry(e))
		case <-ctx.Done():
			return nil, fmt.Errorf("read template keys: %w", ctx.Err())
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	for i := range out {
		e := &out[i]
		if e.Err == nil || e.Name == "" {
			continue
		}
		r := resolveInvalid(ctx, kv, e.Name, e.Revision, e.Value, e.Err)
		if r.histErr != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("read template keys: %w", r.histErr)
		}
		e.Serving, e.Refusal = r.serving, r.refusal
	}
	return out, nil
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

// SetFromEntries builds a Set (generation 0) from the entries as replicas
// serve them: valid ones, the last valid revision of invalid ones, and
// refusals.
func SetFromEntries(entries []Entry, fallback *Template) *Set {
	var ts []*Template
	var refusals []Refusal
	for _, e := range entries {
		switch {
		case e.Template != nil:
			ts = append(ts, e.Template)
		case e.Serving != nil:
			ts = append(ts, e.Serving)
		case e.Refusal != nil:
			refusals = append(refusals, *e.Refusal)
		}
	}
	return NewSet(0, ts, fallback, refusals...)
}

// historyTimeout bounds the history read behind an invalid revision.
const historyTimeout = 5 * time.Second

// resolution is what an invalid revision of a key leaves serving.
type resolution struct {
	serving *Template // last valid revision, nil if none
	notes   []string  // serving's normalization notes
	refusal *Refusal  // when serving is nil and the glob can be read
	histErr error     // the history could not be read
}

// resolveInvalid decides what serves when revision rev of template name,
// value, is invalid (cause): the newest valid revision older than rev in
// the key's history, after its last delete; if there is none, a refusal
// of the glob the value names, so that the resources meant for it are
// not served by another template or the fallback.
func resolveInvalid(ctx context.Context, kv jetstream.KeyValue, name string, rev uint64, value []byte, cause error) resolution {
	var r resolution
	hctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	hist, err := kv.History(hctx, Key(name))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.histErr = fmt.Errorf("read history of %s: %w", Key(name), err)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		h := hist[i]
		if h.Revision() >= rev {
			continue
		}
		if h.Operation() != jetstream.KeyValuePut {
			break // deleted: what came before is not the operator's intent
		}
		if t, notes, err := ParseAndCompile(name, h.Revision(), h.Value()); err == nil {
			r.serving, r.notes = t, notes
			return r
		}
	}
	glob := readGlob(value)
	if glob == "" {
		return r
	}
	why := "no valid revision is in its history"
	if r.histErr != nil {
		why = fmt.Sprintf("its history cannot be read (%v)", r.histErr)
	}
	r.refusal = &Refusal{Name: name, Revision: rev, Glob: glob,
		Reason: fmt.Sprintf("template %s revision %d is invalid (%v) and %s; its resources are refused until a valid template is stored with 'allot config put %s'", name, rev, cause, why, name)}
	return r
}

// readGlob returns the identifier_glob a template document names even if
// the document is otherwise invalid, or "" if it names none that
// ValidateGlob accepts.
func readGlob(data []byte) string {
	if len(data) > MaxTemplateSize {
		return ""
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return ""
	}
	if trimmed[0] != '{' {
		var err error
		if trimmed, err = yaml.YAMLToJSON(trimmed); err != nil {
			return ""
		}
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(trimmed, &doc) != nil {
		return ""
	}
	var globs []string
	for _, k := range []string{"identifier_glob", "identifierGlob"} {
		var g string
		if raw, ok := doc[k]; ok && json.Unmarshal(raw, &g) == nil {
			globs = append(globs, g)
		}
	}
	if len(globs) != 1 || ValidateGlob(globs[0]) != nil {
		return "" // none, or ambiguous
	}
	return collapseStars(globs[0])
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
