package configkv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/quota"
)

// MaxRejectionsPerKey bounds how many rejected revisions Status keeps per
// key.
const MaxRejectionsPerKey = 5

// Status is a watcher's view of the configuration bucket, for operators
// (`allot config status`) and the coordinator's micro stats. It marshals
// to JSON as is.
type Status struct {
	// Bucket is the KV bucket watched.
	Bucket string `json:"bucket"`
	// Generation is the Generation of the Set in use.
	Generation uint64 `json:"generation"`
	// Updated is when the Set in use was built.
	Updated time.Time `json:"updated"`
	// Keys lists every template and namespace key with a value, sorted
	// by key.
	Keys []KeyStatus `json:"keys"`
	// Fallback is the name of the template for unmatched resources
	// (e.g. "builtin:default"), empty when they are rejected.
	Fallback string `json:"fallback,omitempty"`
	// Unmatched is config.UnmatchedDefault if there is a fallback, else
	// config.UnmatchedReject.
	Unmatched config.UnmatchedPolicy `json:"unmatched"`
	// Resyncs counts how often the watch had to be re-established.
	Resyncs uint64 `json:"resyncs,omitempty"`
	// RejectedPuts counts the revisions this watcher rejected as invalid
	// since it started.
	RejectedPuts uint64 `json:"rejected_puts,omitempty"`
	// Unknown lists the keys of the bucket that are not allot's
	// configuration (a misspelt prefix such as "tempaltes."), sorted:
	// their values are ignored.
	Unknown []UnknownKey `json:"unknown,omitempty"`
}

// UnknownKey is a key of the configuration bucket that allot does not
// read.
type UnknownKey struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	// Problem says so, with the key probably meant.
	Problem string `json:"problem"`
}

// KeyStatus is the state of one template or namespace key.
type KeyStatus struct {
	// Key is the KV key ("templates.mysql-main", "namespaces.logins"),
	// Name the template or namespace name.
	Key  string `json:"key"`
	Name string `json:"name"`
	// Namespace is set for a quota namespace key ("namespaces.<name>").
	Namespace bool `json:"namespace,omitempty"`
	// Domains is set for a domains namespace key ("domains.<name>").
	Domains bool `json:"domains,omitempty"`
	// Envoy is set for an Envoy rate limit domain key ("envoy.<domain>").
	Envoy bool `json:"envoy,omitempty"`
	// Revision is the KV revision serving: the latest, or when that is
	// invalid the last valid one in the key's history; 0 if none.
	Revision uint64 `json:"revision"`
	// State says in words what the key serves: "ok", "serving revision N
	// because revision M is invalid: …", or why nothing serves.
	State string `json:"state"`
	// Refused is set while the resources the key's glob wins are refused
	// (no valid revision in its history): the reason they are given.
	Refused string `json:"refused,omitempty"`
	// Glob is the serving template's identifier glob, or the refused one.
	Glob string `json:"glob,omitempty"`
	// Applied is when the serving revision was applied.
	Applied time.Time `json:"applied,omitzero"`
	// Notes are the normalizations applied to the serving revision.
	Notes []string `json:"notes,omitempty"`
	// Rejected lists revisions newer than Revision that this watcher saw
	// fail validation, oldest first, at most MaxRejectionsPerKey. A valid
	// put clears it.
	Rejected []Rejection `json:"rejected,omitempty"`
}

// Rejection is a revision that failed validation.
type Rejection struct {
	Revision uint64    `json:"revision"`
	Error    string    `json:"error"`
	Time     time.Time `json:"time"`
}

// Watcher keeps a config.Set current with the configuration bucket. Create it
// with NewWatcher, then Start it; Current is safe for concurrent use at
// any time after Start returns.
type Watcher struct {
	kv       jetstream.KeyValue
	fallback *config.Template
	log      *slog.Logger

	cur     atomic.Pointer[config.Set]
	updates chan struct{}
	resync  chan struct{}

	mu       sync.Mutex // guards the fields below
	keys     map[string]*keyState
	unknown  map[string]uint64 // keys allot does not read, by revision
	verdicts *statusWriter     // nil: no verdicts written (PublishVerdicts)
	writing  sync.WaitGroup    // the verdict writer
	gen      uint64
	updated  time.Time
	resyncs  uint64
	rejected uint64 // revisions rejected, for Status.RejectedPuts
	cancel   context.CancelFunc
	done     chan struct{}
	started  bool
	onChange []func(*config.Set)
}

type keyState struct {
	name     string
	serving  config.Compiled // serving revision and its notes; none if !serving.Valid()
	applied  time.Time
	rejected []Rejection
	lastRev  uint64          // newest revision seen, valid or not
	refusal  *config.Refusal // when nothing serves and the glob could be read
	state    string          // KeyStatus.State
}

// NewWatcher makes a watcher of kv's template, quota namespace and
// domains namespace keys. Keys of other forms are ignored, and reported
// (the log, Status.Unknown, their verdicts). fallback is
// the template for resources no template matches (nil: none, Match
// returns nil); see config.UnmatchedPolicy.Fallback. logger may be nil.
func NewWatcher(kv jetstream.KeyValue, fallback *config.Template, logger *slog.Logger) *Watcher {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{
		kv:       kv,
		fallback: fallback,
		log:      logger.With("bucket", kv.Bucket()),
		updates:  make(chan struct{}, 1),
		resync:   make(chan struct{}, 1),
		keys:     make(map[string]*keyState),
		unknown:  make(map[string]uint64),
	}
	w.cur.Store(config.NewSet(0, nil, fallback))
	return w
}

// Current returns the Set in use. It never returns nil; before Start it
// holds only the fallback.
func (w *Watcher) Current() *config.Set { return w.cur.Load() }

// Updates returns a channel that receives a value after each applied
// change. Sends do not block: changes that arrive while a value is
// pending are coalesced, so read Current after each receive. Use one
// reader; for several, use OnChange.
func (w *Watcher) Updates() <-chan struct{} { return w.updates }

// OnChange registers f to be called with every new Set, from the
// watcher's goroutine, after it is published. f must not block.
func (w *Watcher) OnChange(f func(*config.Set)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onChange = append(w.onChange, f)
}

// Start watches the bucket and returns once the values present at the
// start are loaded (or ctx ends). ctx bounds only the initial load; the
// watch runs until Stop. Invalid values are logged and recorded in
// Status; they do not fail Start.
func (w *Watcher) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("config watcher: initial load: %w", err)
	}
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("config watcher: already started")
	}
	w.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.done = make(chan struct{})
	w.mu.Unlock()

	kw, err := w.kv.Watch(runCtx, watchAll)
	if err != nil {
		cancel()
		close(w.done)
		return fmt.Errorf("config watcher: watch %s: %w", watchAll, err)
	}
	ready := make(chan struct{})
	go w.run(runCtx, kw, ready)
	select {
	case <-ready:
		w.mu.Lock()
		if sw := w.verdicts; sw != nil {
			// After the initial values: verdicts of keys gone meanwhile
			// are told apart from those of keys not read yet.
			w.writing.Add(1)
			go func() {
				defer w.writing.Done()
				sw.run(runCtx, w.knownKeys)
			}()
			sw.poke()
		}
		w.mu.Unlock()
		return nil
	case <-ctx.Done():
		w.Stop()
		return fmt.Errorf("config watcher: initial load: %w", ctx.Err())
	}
}

// Stop ends the watch and waits for the watcher's goroutine. Current keeps
// returning the last Set.
func (w *Watcher) Stop() {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	w.writing.Wait()
}

// Resync re-establishes the watch at once and reconciles with the
// bucket's current contents. It does not block. Call it from the NATS
// connection's reconnect handler: nats.go's ordered consumer behind the
// KV watch recovers from a lost consumer by itself, but only once it
// misses two 5s idle heartbeats, so updates can lag 10-20s after a
// server restart without it.
func (w *Watcher) Resync() {
	select {
	case w.resync <- struct{}{}:
	default:
	}
}

// run consumes KV watchers until ctx ends. When a KV watcher closes on its
// own (its subscription was closed, e.g. the connection closed or the
// ordered consumer could not be recreated) or Resync is called, run
// watches again from scratch and reconciles: keys absent from the new
// initial values were deleted meanwhile.
func (w *Watcher) run(ctx context.Context, kw jetstream.KeyWatcher, ready chan struct{}) {
	defer close(w.done)
	var readyOnce sync.Once
	markReady := func() { readyOnce.Do(func() { close(ready) }) }
	const minBackoff = 100 * time.Millisecond
	backoff := minBackoff
	for {
		requested := w.consume(ctx, kw, markReady)
		_ = kw.Stop()
		if ctx.Err() != nil {
			return
		}
		if requested {
			w.log.Info("config watch: resync requested; watching again")
			backoff = 0
		} else {
			w.log.Warn("config watch closed; watching again", "retry_in", backoff)
		}
		for {
			if backoff > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
			}
			backoff = min(max(backoff*2, minBackoff), 5*time.Second)
			var err error
			kw, err = w.kv.Watch(ctx, watchAll)
			if err == nil {
				backoff = minBackoff
				break
			}
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("config watch failed", "err", err, "retry_in", backoff)
		}
		w.mu.Lock()
		w.resyncs++
		w.mu.Unlock()
	}
}

// consume applies kw's entries until ctx ends, kw closes (false) or a
// resync is requested (true). The initial values are applied as one
// change.
func (w *Watcher) consume(ctx context.Context, kw jetstream.KeyWatcher, markReady func()) (resync bool) {
	seen := make(map[string]bool)
	initial, changed := true, false
	for {
		select {
		case <-ctx.Done():
			return false
		case <-w.resync:
			return true
		case e, ok := <-kw.Updates():
			if !ok {
				return false
			}
			if e == nil {
				if initial {
					initial = false
					if w.removeUnseen(seen) {
						changed = true
					}
					if changed || w.Current().Generation == 0 {
						w.publish("initial values")
					}
					markReady()
				}
				continue
			}
			if initial {
				seen[e.Key()] = true
			}
			if w.apply(ctx, e) {
				if initial {
					changed = true // publish once, after the initial values
				} else {
					w.publish(e.Key())
				}
			}
		}
	}
}

// apply records one KV entry and reports whether the Set must change.
// Only the run goroutine calls it, so it reads the key states without
// the lock and takes it to change them.
func (w *Watcher) apply(ctx context.Context, e jetstream.KeyValueEntry) bool {
	key, rev := e.Key(), e.Revision()
	ks := w.keys[key]
	if ks != nil && rev <= ks.lastRev {
		return false // already seen (watch re-established)
	}
	if last, ok := w.unknown[key]; ok && rev <= last {
		return false
	}
	log := w.log.With("key", key, "revision", rev)
	what := "template"
	switch {
	case strings.HasPrefix(key, config.NamespacePrefix):
		what = "namespace"
	case strings.HasPrefix(key, config.DomainsPrefix):
		what = "domains namespace"
	case strings.HasPrefix(key, config.EnvoyPrefix):
		what = "envoy domain"
	}
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		w.mu.Lock()
		delete(w.keys, key)
		delete(w.unknown, key)
		w.verdict(key, nil)
		w.mu.Unlock()
		if ks != nil && (ks.serving.Valid() || ks.refusal != nil) {
			log.Info(what+" deleted; what it served falls back to the next match", "op", e.Operation().String())
			return true
		}
		return false
	}
	name, c, ok := config.CompileKey(key, rev, e.Value())
	if !ok {
		// Not allot's configuration, most likely a misspelt key: said
		// wherever an operator looks, since the put itself succeeded.
		problem := config.UnknownKeyProblem(key)
		log.Warn("ignored a key of the configuration bucket", "problem", problem)
		w.mu.Lock()
		w.unknown[key] = rev
		w.verdict(key, &Verdict{Key: key, Revision: rev, Errors: []string{problem}, State: "ignored: not allot's configuration"})
		w.mu.Unlock()
		return false
	}
	if c.Err == nil {
		w.mu.Lock()
		ks = w.seen(key, name, rev)
		ks.serving, ks.rejected, ks.applied, ks.refusal, ks.state = c, nil, time.Now(), nil, "ok"
		w.verdict(key, &Verdict{Key: key, Revision: rev, OK: true, Notes: c.Notes, State: ks.state})
		w.mu.Unlock()
		switch {
		case c.Template != nil:
			t := c.Template
			log.Info("template applied", "glob", t.Glob, "algorithm", t.Algorithm.String(), "capacity", t.Capacity)
		case c.Namespace != nil:
			log.Info("quota namespace applied", "buckets", len(c.Namespace.Buckets), "default", c.Namespace.Default != nil, "dynamic", c.Namespace.Dynamic != nil)
		case c.Envoy != nil:
			log.Info("envoy domain applied", "domain", c.Envoy.Domain.Name, "descriptors", len(c.Envoy.Domain.Descriptors))
		default:
			log.Info("domains namespace applied", "resources", len(c.Domains.Resources), "ignore_configured", c.Domains.IgnoreConfigured, "allow_unconfigured", c.Domains.AllowUnconfigured)
		}
		for _, n := range c.Notes {
			log.Info(what+" normalized", "note", n)
		}
		return true
	}
	err := c.Err

	// Invalid: serve the newest valid revision, from memory or from the
	// key's history (a fresh watcher, or puts missed while the watch was
	// down), else refuse the resources a template was meant for.
	var res resolution
	if name != "" {
		res = resolveInvalid(ctx, w.kv, key, name, rev, e.Value(), err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ks = w.seen(key, name, rev)
	defer func() { // once ks.state says what serves instead
		w.verdict(key, &Verdict{Key: key, Revision: rev, Errors: config.ProblemList(err), State: ks.state})
	}()
	ks.rejected = append(ks.rejected, Rejection{Revision: rev, Error: err.Error(), Time: time.Now()})
	w.rejected++
	if n := len(ks.rejected); n > MaxRejectionsPerKey {
		ks.rejected = slices.Delete(ks.rejected, 0, n-MaxRejectionsPerKey)
	}
	old, oldRefusal := ks.serving, ks.refusal
	if res.serving.Valid() && (!old.Valid() || res.serving.Revision() > old.Revision()) {
		ks.serving, ks.applied = res.serving, time.Now()
	}
	if ks.serving.Valid() {
		ks.refusal = nil
		ks.state = fmt.Sprintf("serving revision %d because revision %d is invalid: %v", ks.serving.Revision(), rev, err)
		log.Warn("rejected invalid "+what+"; the last valid revision serves", "err", err, "serving_revision", ks.serving.Revision())
		return ks.serving.Revision() != old.Revision() || oldRefusal != nil
	}
	ks.refusal = res.refusal
	switch {
	case ks.refusal != nil:
		ks.state = "refusing resources matching " + strconv.Quote(ks.refusal.Glob) + ": " + ks.refusal.Reason
		log.Error("rejected invalid template with no valid revision in its history; refusing the resources it names", "err", err, "glob", ks.refusal.Glob, "history_err", res.histErr)
	case what == "namespace":
		ks.state = fmt.Sprintf("revision %d is invalid (%v) and no valid revision is in the key's history: the namespace is not served, so its keys get the global default (namespaces.%s) as before it was written", rev, err, quota.GlobalDefault)
		if res.histErr != nil {
			ks.state += fmt.Sprintf(" (history: %v)", res.histErr)
		}
		log.Error("rejected invalid namespace with no valid revision in its history; its keys get the global default", "err", err, "history_err", res.histErr)
	case what == "domains namespace":
		ks.state = fmt.Sprintf("revision %d is invalid (%v) and no valid revision is in the key's history: the domains namespace is not served, so its resources are unknown as before it was written", rev, err)
		if res.histErr != nil {
			ks.state += fmt.Sprintf(" (history: %v)", res.histErr)
		}
		log.Error("rejected invalid domains namespace with no valid revision in its history; it is not served", "err", err, "history_err", res.histErr)
	case what == "envoy domain":
		ks.state = fmt.Sprintf("revision %d is invalid (%v) and no valid revision is in the key's history: the domain is not served, so its requests are answered OK with no limit, as before it was written", rev, err)
		if res.histErr != nil {
			ks.state += fmt.Sprintf(" (history: %v)", res.histErr)
		}
		log.Error("rejected invalid envoy domain with no valid revision in its history; it is not served", "err", err, "history_err", res.histErr)
	default:
		ks.state = fmt.Sprintf("revision %d is invalid (%v) and no valid revision is in the key's history; its identifier_glob cannot be read, so nothing can be refused in its name: the resources it was meant for get the next matching template", rev, err)
		if res.histErr != nil {
			ks.state += fmt.Sprintf(" (history: %v)", res.histErr)
		}
		log.Error("rejected invalid template with no valid revision in its history and no readable identifier_glob; its resources get the next matching template", "err", err, "history_err", res.histErr)
	}
	return ks.refusal != nil || oldRefusal != nil
}

// seen returns key's state, created if new, with revision rev of
// template name recorded as seen. w.mu must be held.
func (w *Watcher) seen(key, name string, rev uint64) *keyState {
	ks := w.keys[key]
	if ks == nil {
		ks = &keyState{}
		w.keys[key] = ks
	}
	ks.name, ks.lastRev = name, rev
	return ks
}

// removeUnseen drops keys not in seen (deleted while the watch was down)
// and reports whether a serving template went away.
func (w *Watcher) removeUnseen(seen map[string]bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := false
	for key := range w.unknown {
		if !seen[key] {
			delete(w.unknown, key)
			w.verdict(key, nil)
		}
	}
	for key, ks := range w.keys {
		if !seen[key] {
			delete(w.keys, key)
			w.verdict(key, nil)
			if ks.serving.Valid() || ks.refusal != nil {
				w.log.Info("key gone after re-watch; what it served falls back to the next match", "key", key)
				changed = true
			}
		}
	}
	return changed
}

// publish builds and installs a new Set and notifies listeners.
func (w *Watcher) publish(cause string) {
	w.mu.Lock()
	var ts []*config.Template
	var refusals []config.Refusal
	var nss []*quota.Namespace
	var doms []*domainlimit.Namespace
	var envoy []*config.EnvoyDomain
	for _, key := range slices.Sorted(maps.Keys(w.keys)) {
		ks := w.keys[key]
		switch {
		case ks.serving.Template != nil:
			ts = append(ts, ks.serving.Template)
		case ks.serving.Namespace != nil:
			nss = append(nss, ks.serving.Namespace)
		case ks.serving.Domains != nil:
			doms = append(doms, ks.serving.Domains)
		case ks.serving.Envoy != nil:
			envoy = append(envoy, ks.serving.Envoy)
		case ks.refusal != nil:
			refusals = append(refusals, *ks.refusal)
		}
	}
	w.gen++
	w.updated = time.Now()
	set := withEnvoy(config.NewSet(w.gen, ts, w.fallback, refusals...).WithQuota(config.NewQuotaConfig(nss...)).WithDomains(doms...), envoy, w.log)
	w.cur.Store(set)
	hooks := slices.Clone(w.onChange)
	w.mu.Unlock()

	w.log.Debug("configuration set published", "generation", set.Generation, "templates", len(ts), "namespaces", len(nss), "domains", len(doms), "envoy_domains", len(envoy), "cause", cause)
	select {
	case w.updates <- struct{}{}:
	default:
	}
	for _, f := range hooks {
		f(set)
	}
}

// Status reports what the watcher serves.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := Status{
		Bucket:     w.kv.Bucket(),
		Generation: w.Current().Generation,
		Updated:    w.updated,
		Keys:       []KeyStatus{},
		Unmatched:  config.UnmatchedReject,
		Resyncs:    w.resyncs,
	}
	st.RejectedPuts = w.rejected
	if w.fallback != nil {
		st.Fallback, st.Unmatched = w.fallback.Name, config.UnmatchedDefault
	}
	for _, key := range slices.Sorted(maps.Keys(w.keys)) {
		ks := w.keys[key]
		k := KeyStatus{Key: key, Name: ks.name, Namespace: strings.HasPrefix(key, config.NamespacePrefix), Domains: strings.HasPrefix(key, config.DomainsPrefix), Envoy: strings.HasPrefix(key, config.EnvoyPrefix), State: ks.state,
			Notes: slices.Clone(ks.serving.Notes), Rejected: slices.Clone(ks.rejected)}
		switch {
		case ks.serving.Valid():
			k.Revision, k.Applied = ks.serving.Revision(), ks.applied
			if t := ks.serving.Template; t != nil {
				k.Glob = t.Glob
			}
		case ks.refusal != nil:
			k.Glob, k.Refused = ks.refusal.Glob, ks.refusal.Reason
		}
		st.Keys = append(st.Keys, k)
	}
	for _, key := range slices.Sorted(maps.Keys(w.unknown)) {
		st.Unknown = append(st.Unknown, UnknownKey{Key: key, Revision: w.unknown[key], Problem: config.UnknownKeyProblem(key)})
	}
	return st
}

// String summarizes a status in one line, for logs.
func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d:", s.Generation)
	for _, k := range s.Keys {
		fmt.Fprintf(&b, " %s@%d", k.Name, k.Revision)
		if len(k.Rejected) > 0 {
			fmt.Fprintf(&b, "(rejected@%d)", k.Rejected[len(k.Rejected)-1].Revision)
		}
	}
	return b.String()
}
