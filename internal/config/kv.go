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

	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/quota"
)

// Names in the configuration bucket.
const (
	// DefaultBucket is the KV bucket that holds resource templates.
	DefaultBucket = "allot_config"
	// KeyPrefix starts every template key: "templates.<name>".
	KeyPrefix = "templates."
	// WatchPattern matches every template key.
	WatchPattern = KeyPrefix + ">"
	// watchAll is what watchers and LoadAll read: templates and quota
	// namespaces (keys of other forms are skipped).
	watchAll = ">"
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

// Entry is one template or namespace key as read from the bucket by
// LoadAll.
type Entry struct {
	// Name is the template or namespace name, Key the KV key.
	Name, Key string
	// Revision is the KV revision of the value.
	Revision uint64
	// Value is the stored document.
	Value []byte
	// Template is the compiled template, nil if Err is set or the key is
	// a namespace key.
	Template *Template
	// Namespace is the parsed quota namespace of a namespace key
	// (NamespacePrefix), nil if Err is set or the key is a template key.
	Namespace *quota.Namespace
	// Notes are Compile's normalization notes.
	Notes []string
	// Err is why the value was rejected.
	Err error
	// Serving is, when Err is set, the key's last valid revision before
	// this one (from the key's history): what replicas serve instead. Nil
	// if there is none.
	Serving *Template
	// ServingNamespace is Serving for a namespace key.
	ServingNamespace *quota.Namespace
	// Domains is the parsed namespace of a domains key (DomainsPrefix),
	// nil if Err is set or the key is of another kind; ServingDomains is
	// Serving for a domains key.
	Domains, ServingDomains *domainlimit.Namespace
	// Refusal is set when Err is set, Serving is nil and the value's
	// identifier_glob can be read: replicas refuse the resources it wins.
	Refusal *Refusal
}

// IsNamespace reports whether e is a quota namespace key.
func (e *Entry) IsNamespace() bool { return strings.HasPrefix(e.Key, NamespacePrefix) }

// IsDomains reports whether e is a domains namespace key.
func (e *Entry) IsDomains() bool { return strings.HasPrefix(e.Key, DomainsPrefix) }

// LoadAll reads every template and namespace key of kv and compiles it.
// Invalid values are returned with Err set, not as an error, and with
// what replicas serve in their place (Serving, ServingNamespace or
// Refusal). Keys of other forms are skipped.
func LoadAll(ctx context.Context, kv jetstream.KeyValue) ([]Entry, error) {
	w, err := kv.Watch(ctx, watchAll, jetstream.IgnoreDeletes())
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
			if ce, ok := compileEntry(e); ok {
				out = append(out, ce)
			}
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
		r := resolveInvalid(ctx, kv, e.Key, e.Name, e.Revision, e.Value, e.Err)
		if r.histErr != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("read template keys: %w", r.histErr)
		}
		e.Serving, e.ServingNamespace, e.ServingDomains, e.Refusal = r.serving.tmpl, r.serving.ns, r.serving.dom, r.refusal
	}
	return out, nil
}

// compileEntry compiles a template or namespace entry; ok is false for
// keys of other forms.
func compileEntry(e jetstream.KeyValueEntry) (Entry, bool) {
	name, c, ok := compileKey(e.Key(), e.Revision(), e.Value())
	if !ok {
		return Entry{}, false
	}
	return Entry{Key: e.Key(), Name: name, Revision: e.Revision(), Value: e.Value(),
		Template: c.tmpl, Namespace: c.ns, Domains: c.dom, Notes: c.notes, Err: c.err}, true
}

// compiled is one key's value compiled by the key's kind: a template, a
// quota namespace or a domains namespace.
type compiled struct {
	tmpl  *Template
	ns    *quota.Namespace
	dom   *domainlimit.Namespace
	notes []string
	err   error
}

// valid reports whether c holds a template or namespace.
func (c compiled) valid() bool { return c.tmpl != nil || c.ns != nil || c.dom != nil }

// revision is the KV revision of the template or namespace c holds.
func (c compiled) revision() uint64 {
	switch {
	case c.tmpl != nil:
		return c.tmpl.Revision
	case c.ns != nil:
		return c.ns.Revision
	case c.dom != nil:
		return c.dom.Revision
	}
	return 0
}

// compileKey compiles revision rev of key: a template key ("templates.")
// with ParseAndCompile, a namespace key ("namespaces.") with
// ParseNamespace, a domains key ("domains.") with ParseDomains. It
// returns the template or namespace name, and ok false for keys of other
// forms, which are not allot's configuration.
func compileKey(key string, rev uint64, value []byte) (name string, c compiled, ok bool) {
	switch {
	case strings.HasPrefix(key, KeyPrefix):
		name, _ = NameFromKey(key)
		c.tmpl, c.notes, c.err = ParseAndCompile(name, rev, value)
	case strings.HasPrefix(key, NamespacePrefix):
		name, _ = NamespaceFromKey(key)
		c.ns, c.notes, c.err = ParseNamespace(name, rev, value)
	case strings.HasPrefix(key, DomainsPrefix):
		name, _ = DomainsFromKey(key)
		c.dom, c.notes, c.err = ParseDomains(name, rev, value)
	default:
		return "", c, false
	}
	return name, c, true
}

// SetFromEntries builds a Set (generation 0) from the entries as replicas
// serve them: valid ones, the last valid revision of invalid ones, and
// refusals; its Quota and Domains hold the namespaces served likewise.
func SetFromEntries(entries []Entry, fallback *Template) *Set {
	var ts []*Template
	var refusals []Refusal
	var nss []*quota.Namespace
	var doms []*domainlimit.Namespace
	for _, e := range entries {
		switch {
		case e.Template != nil:
			ts = append(ts, e.Template)
		case e.Serving != nil:
			ts = append(ts, e.Serving)
		case e.Namespace != nil:
			nss = append(nss, e.Namespace)
		case e.ServingNamespace != nil:
			nss = append(nss, e.ServingNamespace)
		case e.Domains != nil:
			doms = append(doms, e.Domains)
		case e.ServingDomains != nil:
			doms = append(doms, e.ServingDomains)
		case e.Refusal != nil:
			refusals = append(refusals, *e.Refusal)
		}
	}
	return NewSet(0, ts, fallback, refusals...).WithQuota(NewQuotaConfig(nss...)).WithDomains(doms...)
}

// historyTimeout bounds the history read behind an invalid revision.
const historyTimeout = 5 * time.Second

// resolution is what an invalid revision of a key leaves serving.
type resolution struct {
	serving compiled // last valid revision (and its notes); none if !serving.valid()
	refusal *Refusal // when nothing serves and the glob can be read
	histErr error    // the history could not be read
}

// resolveInvalid decides what serves when revision rev of key (template
// or namespace name), value, is invalid (cause): the newest valid
// revision older than rev in the key's history, after its last delete.
// If there is none, a template key refuses the glob the value names, so
// that the resources meant for it are not served by another template or
// the fallback; a namespace key serves nothing, so its keys get what they
// got before the key existed (the global default).
func resolveInvalid(ctx context.Context, kv jetstream.KeyValue, key, name string, rev uint64, value []byte, cause error) resolution {
	var r resolution
	hctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	hist, err := kv.History(hctx, key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.histErr = fmt.Errorf("read history of %s: %w", key, err)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		h := hist[i]
		if h.Revision() >= rev {
			continue
		}
		if h.Operation() != jetstream.KeyValuePut {
			break // deleted: what came before is not the operator's intent
		}
		if _, c, _ := compileKey(key, h.Revision(), h.Value()); c.valid() {
			r.serving = c
			return r
		}
	}
	if !strings.HasPrefix(key, KeyPrefix) {
		return r
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
