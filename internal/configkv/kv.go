// Package configkv keeps allot's configuration (internal/config's
// documents) in JetStream KV: it opens and seeds the configuration
// bucket, reads it whole with each key's history, watches it for the
// servers, and mirrors it down the tree. Everything in it talks to
// JetStream; what the documents mean is internal/config's.
package configkv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/jsretry"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/subjects"
)

// BucketDescription is the configuration bucket's description, as
// `nats kv info` shows it: it holds every kind of allot's documents.
const BucketDescription = "allot configuration, one document per key: resource templates (templates.NAME), quota namespaces (namespaces.NAMESPACE), domain limits (domains.NAMESPACE) and Envoy rate limit domains (envoy.DOMAIN)"

// Names in the configuration bucket (the keys in it are
// internal/config's).
const (
	// DefaultBucket is the KV bucket that holds resource templates.
	DefaultBucket = subjects.ConfigBucket
	// watchAll is what watchers and LoadAll read: templates and quota
	// namespaces (keys of other forms are skipped).
	watchAll = ">"
	// BucketHistory is how many revisions per key the bucket keeps, for
	// `allot config history` and so that a replica that starts after an
	// invalid put finds the last valid revision to serve.
	BucketHistory = 10
)

// BucketOption sets how OpenBucket and OpenMirror create a missing
// bucket. An existing bucket is used as it is: allot never changes a
// bucket's configuration.
type BucketOption func(*jetstream.KeyValueConfig)

// Replicas sets the replica count of a bucket allot creates (default 1):
// 3 on a three-server cluster, as for the election and state buckets, so
// that the configuration survives the loss of a server.
func Replicas(n int) BucketOption {
	return func(c *jetstream.KeyValueConfig) { c.Replicas = n }
}

// OpenBucket returns the configuration bucket. With create, a missing
// bucket is created (file storage, BucketHistory revisions per key, opts);
// an existing bucket is used as it is.
func OpenBucket(ctx context.Context, js jetstream.JetStream, bucket string, create bool, opts ...BucketOption) (jetstream.KeyValue, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	var kv jetstream.KeyValue
	creating := false // the last attempt failed creating the bucket
	// JetStream may not be ready yet (a fresh cluster electing its meta
	// leader): such failures are retried until ctx ends.
	err := jsretry.Do(ctx, func(ctx context.Context) error {
		creating = false
		var err error
		kv, err = js.KeyValue(ctx, bucket)
		if err == nil || !create || !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
		cfg := jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: BucketDescription,
			History:     BucketHistory,
			Storage:     jetstream.FileStorage,
		}
		for _, o := range opts {
			o(&cfg)
		}
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // lost a race with another creator
			kv, err = js.KeyValue(ctx, bucket)
		}
		creating = err != nil
		return err
	})
	switch {
	case err != nil && creating:
		return nil, fmt.Errorf("create configuration bucket %q: %w", bucket, err)
	case err != nil:
		return nil, fmt.Errorf("open configuration bucket %q: %w", bucket, err)
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
	Template *config.Template
	// Namespace is the parsed quota namespace of a namespace key
	// (config.NamespacePrefix), nil if Err is set or the key is a template key.
	Namespace *quota.Namespace
	// Notes are the normalization notes (config.CompileKey).
	Notes []string
	// Err is why the value was rejected.
	Err error
	// Serving is, when Err is set, the key's last valid revision before
	// this one (from the key's history): what replicas serve instead. Nil
	// if there is none.
	Serving *config.Template
	// ServingNamespace is Serving for a namespace key.
	ServingNamespace *quota.Namespace
	// Domains is the parsed namespace of a domains key (config.DomainsPrefix),
	// nil if Err is set or the key is of another kind; ServingDomains is
	// Serving for a domains key.
	Domains, ServingDomains *domainlimit.Namespace
	// Envoy is the parsed domain of an Envoy domain key
	// (config.EnvoyPrefix), nil if Err is set or the key is of another
	// kind; ServingEnvoy is Serving for an Envoy domain key.
	Envoy, ServingEnvoy *config.EnvoyDomain
	// Refusal is set when Err is set, Serving is nil and the value's
	// identifier_glob can be read: replicas refuse the resources it wins.
	Refusal *config.Refusal
}

// IsNamespace reports whether e is a quota namespace key.
func (e *Entry) IsNamespace() bool { return strings.HasPrefix(e.Key, config.NamespacePrefix) }

// IsDomains reports whether e is a domains namespace key.
func (e *Entry) IsDomains() bool { return strings.HasPrefix(e.Key, config.DomainsPrefix) }

// IsEnvoy reports whether e is an Envoy domain key.
func (e *Entry) IsEnvoy() bool { return strings.HasPrefix(e.Key, config.EnvoyPrefix) }

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
		e.Serving, e.ServingNamespace, e.ServingDomains, e.ServingEnvoy, e.Refusal = r.serving.Template, r.serving.Namespace, r.serving.Domains, r.serving.Envoy, r.refusal
	}
	return out, nil
}

// compileEntry compiles a template or namespace entry; ok is false for
// keys of other forms.
func compileEntry(e jetstream.KeyValueEntry) (Entry, bool) {
	name, c, ok := config.CompileKey(e.Key(), e.Revision(), e.Value())
	if !ok {
		return Entry{}, false
	}
	return Entry{Key: e.Key(), Name: name, Revision: e.Revision(), Value: e.Value(),
		Template: c.Template, Namespace: c.Namespace, Domains: c.Domains, Envoy: c.Envoy, Notes: c.Notes, Err: c.Err}, true
}

// SetFromEntries builds a config.Set (generation 0) from the entries as replicas
// serve them: valid ones, the last valid revision of invalid ones, and
// refusals; its Quota, Domains and Envoy hold the namespaces and domains
// served likewise.
func SetFromEntries(entries []Entry, fallback *config.Template) *config.Set {
	var ts []*config.Template
	var refusals []config.Refusal
	var nss []*quota.Namespace
	var doms []*domainlimit.Namespace
	var envoy []*config.EnvoyDomain
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
		case e.Envoy != nil:
			envoy = append(envoy, e.Envoy)
		case e.ServingEnvoy != nil:
			envoy = append(envoy, e.ServingEnvoy)
		case e.Refusal != nil:
			refusals = append(refusals, *e.Refusal)
		}
	}
	return withEnvoy(config.NewSet(0, ts, fallback, refusals...).WithQuota(config.NewQuotaConfig(nss...)).WithDomains(doms...), envoy, nil)
}

// withEnvoy returns set with the Envoy domains ds. Each key's domain is
// its own, so they cannot clash; should they anyway, set is returned
// without them and the failure logged (log may be nil).
func withEnvoy(set *config.Set, ds []*config.EnvoyDomain, log *slog.Logger) *config.Set {
	out, err := set.WithEnvoy(ds...)
	if err != nil {
		if log != nil {
			log.Error("Envoy domains not applied", "err", err)
		}
		return set
	}
	return out
}

// historyTimeout bounds the history read behind an invalid revision.
const historyTimeout = 5 * time.Second

// resolution is what an invalid revision of a key leaves serving.
type resolution struct {
	serving config.Compiled // last valid revision (and its notes); none if !serving.Valid()
	refusal *config.Refusal // when nothing serves and the glob can be read
	histErr error           // the history could not be read
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
		if _, c, _ := config.CompileKey(key, h.Revision(), h.Value()); c.Valid() {
			r.serving = c
			return r
		}
	}
	if !strings.HasPrefix(key, config.KeyPrefix) {
		return r
	}
	glob := config.ReadGlob(value)
	if glob == "" {
		return r
	}
	why := "no valid revision is in its history"
	if r.histErr != nil {
		why = fmt.Sprintf("its history cannot be read (%v)", r.histErr)
	}
	r.refusal = &config.Refusal{Name: name, Revision: rev, Glob: glob,
		Reason: fmt.Sprintf("template %s revision %d is invalid (%v) and %s; its resources are refused until a valid template is stored with 'allot config put %s'", name, rev, cause, why, name)}
	return r
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
		if _, _, err := config.ParseAndCompile(name, 0, data); err != nil {
			return nil, fmt.Errorf("template %s: %w", f.Name(), err)
		}
		seeds = append(seeds, seed{name, data})
	}
	var stored []string
	for _, s := range seeds {
		_, err := kv.History(ctx, config.Key(s.name))
		if err == nil {
			continue // exists, or existed and was deleted by an operator
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return stored, fmt.Errorf("seed template %s: %w", s.name, err)
		}
		_, err = kv.Create(ctx, config.Key(s.name), s.data)
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
