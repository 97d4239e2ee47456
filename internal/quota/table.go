package quota

import (
	"errors"
	"fmt"
	"sync"

	"github.com/allot/allot/status"
)

// DefaultBucketName is the name part of the bucket string Take returns
// when a namespace's default bucket answered: "ns:<default>", or
// "_default:<default>" for the global default. It cannot collide with a
// bucket name.
const DefaultBucketName = "<default>"

// Events counts quotaservice's events for one namespace
// (status.QuotaEvents, which the quota servers' STATS carry).
type Events = status.QuotaEvents

// Options tunes a Table.
type Options struct {
	// Since is when the state of the buckets starts being known (a new
	// leader after a failover). Every bucket first used is treated as if
	// it had been drained at Since: a token bucket starts with
	// min(size, fill_rate×(now−Since)) tokens, a window as if its limit
	// was admitted at Since. So a failover never admits more than the
	// limit. The zero Since starts buckets full, as quotaservice does.
	//
	// The previous leader's OK_WAIT answers take effect up to a wait
	// after its last decision, so Since must be no earlier than that
	// decision plus the longest wait_timeout configured (and for a
	// TOKEN_BUCKET no more than its max_debt): the previous leader's
	// lease end plus that wait is a safe choice. Since may be in the
	// future: nothing is admitted to take effect before it. Unix
	// nanoseconds, as every time the table takes; 0 starts buckets full.
	Since int64
}

// Table holds the buckets of every namespace and decides for them. It is
// safe for concurrent use: one mutex guards it, since a decision is a
// few tens of nanoseconds and sharding would cost a hash per call and a
// shared per-namespace cap on dynamic buckets.
//
// Lookup for Take(ns, name): the named bucket → a dynamic bucket for name
// (created on first use; REJECTED "too_many_buckets" past the
// namespace's cap) → the namespace's default → the global default (the
// Default of namespace "_default") → REJECTED "no_bucket". Requests for
// namespaces not in the configuration count their events under
// "_default".
type Table struct {
	mu       sync.Mutex
	since    int64
	hasSince bool
	spaces   map[string]*space
	bans     map[banKey]*banState
	alive    int
}

// space is one namespace's configuration and buckets.
type space struct {
	name    string
	named   map[string]*compiled
	def     *compiled
	dyn     *compiled
	maxDyn  int
	buckets map[string]*bucket // named and dynamic, by name
	defB    *bucket
	dynamic int // dynamic buckets alive
	ev      Events
}

// NewTable returns a table answering for cfg (see SetConfig).
func NewTable(cfg *Config, opts Options) *Table {
	t := &Table{spaces: map[string]*space{}, bans: map[banKey]*banState{}}
	if opts.Since != 0 {
		t.since, t.hasSince = opts.Since, true
	}
	t.SetConfig(cfg)
	return t
}

// Validate checks every namespace of c: names, specs (see Spec.Validate)
// and caps. SetConfig skips what Validate rejects, so callers validate
// first to report errors.
func (c *Config) Validate() error {
	var errs []error
	for k, ns := range c.Namespaces {
		if !ValidName(k) {
			errs = append(errs, fmt.Errorf("namespace %q: name must match [A-Za-z0-9_]+ and be at most %d bytes", clip(k), MaxNameLen))
			continue
		}
		if ns == nil {
			errs = append(errs, fmt.Errorf("namespace %s: empty", k))
			continue
		}
		if ns.MaxDynamicBuckets < 0 {
			errs = append(errs, fmt.Errorf("namespace %s: max_dynamic_buckets: %d must not be negative", k, ns.MaxDynamicBuckets))
		}
		for name, s := range ns.Buckets {
			if !ValidName(name) {
				errs = append(errs, fmt.Errorf("namespace %s: bucket %q: name must match [A-Za-z0-9_]+ and be at most %d bytes", k, clip(name), MaxNameLen))
			} else if err := validSpec(s); err != nil {
				errs = append(errs, fmt.Errorf("namespace %s: buckets.%s: %w", k, name, err))
			}
		}
		if ns.Default != nil {
			if err := validSpec(ns.Default); err != nil {
				errs = append(errs, fmt.Errorf("namespace %s: default_bucket: %w", k, err))
			}
		}
		if ns.Dynamic != nil {
			if err := validSpec(ns.Dynamic); err != nil {
				errs = append(errs, fmt.Errorf("namespace %s: dynamic_bucket_template: %w", k, err))
			}
		}
	}
	return errors.Join(errs...)
}

func validSpec(s *Spec) error {
	if s == nil {
		return errors.New("empty")
	}
	return s.Validate()
}

// compileSpec compiles s, nil when s is nil or invalid.
func compileSpec(s *Spec) *compiled {
	if s == nil {
		return nil
	}
	c, err := compile(s)
	if err != nil {
		return nil
	}
	return c
}

// SetConfig replaces the configuration (hot reload). Invalid names and
// specs are skipped as if absent (see Config.Validate). A bucket keeps its
// state when its algorithm and rate are unchanged (same nanoseconds per
// token for TOKEN_BUCKET, LEAKY_BUCKET and GCRA; same window for the
// window algorithms): the state then records admissions really made,
// which count against the new size or limit (a token bucket's tokens are
// cut to a smaller size). Any other changed bucket restarts as if drained
// at the latest time it had seen or admitted for (as after a failover):
// every window that includes the switch already counts the full new
// limit, and a token bucket refills from empty at the new rate. That is
// harsher than converting the state, but it can never admit more than
// the new limit because of the switch, whatever the old and new
// algorithms. Buckets that no longer resolve are dropped.
func (t *Table) SetConfig(cfg *Config) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.spaces
	t.spaces = make(map[string]*space, len(old))
	if cfg != nil {
		for k, ns := range cfg.Namespaces {
			if ns == nil || !ValidName(k) || ns.MaxDynamicBuckets < 0 {
				continue
			}
			sp := &space{name: k, named: make(map[string]*compiled, len(ns.Buckets)), buckets: map[string]*bucket{},
				def: compileSpec(ns.Default), dyn: compileSpec(ns.Dynamic), maxDyn: ns.MaxDynamicBuckets}
			for name, s := range ns.Buckets {
				if c := compileSpec(s); c != nil && ValidName(name) {
					sp.named[name] = c
				}
			}
			t.spaces[k] = sp
		}
	}
	if t.spaces[GlobalDefault] == nil {
		// Holds the events of unknown namespaces.
		t.spaces[GlobalDefault] = &space{name: GlobalDefault, named: map[string]*compiled{}, buckets: map[string]*bucket{}}
	}
	for k, osp := range old {
		sp := t.spaces[k]
		if sp == nil {
			t.alive -= len(osp.buckets)
			if osp.defB != nil {
				t.alive--
			}
			continue
		}
		sp.ev = osp.ev
		for name, b := range osp.buckets {
			c, dynamic := sp.named[name], false
			if c == nil && sp.dyn != nil {
				c, dynamic = sp.dyn, true
			}
			if c == nil {
				t.alive--
				sp.ev.Removed++
				continue
			}
			carry(b, c)
			b.dynamic = dynamic
			if dynamic {
				sp.dynamic++
			}
			sp.buckets[name] = b
		}
		if b := osp.defB; b != nil {
			if sp.def == nil {
				t.alive--
				sp.ev.Removed++
			} else {
				carry(b, sp.def)
				sp.defB = b
			}
		}
	}
}

// carry moves b to spec c (see SetConfig).
func carry(b *bucket, c *compiled) {
	o := b.c
	same := o.spec.Algorithm == c.spec.Algorithm
	switch o.spec.Algorithm {
	case TokenBucket, LeakyBucket, GCRA:
		same = same && o.interval == c.interval
	default:
		same = same && o.window == c.window
	}
	if !same {
		d := b.lastAt()
		b.reset(c, d, true, d)
		return
	}
	b.c = c
	if c.spec.Algorithm == TokenBucket {
		b.s[0] = min(b.s[0], c.capNs)
	}
}

// Take decides req for bucket name of namespace ns at tn (Unix
// nanoseconds, as every time the table takes). It returns the
// decision and the bucket that answered: "ns:name" for a named or dynamic
// bucket, "ns:<default>" for the namespace default, "_default:<default>"
// for the global default, "" when none did (REJECTED "no_bucket" or
// "too_many_buckets"). It never blocks beyond the table's mutex and does
// not allocate for an existing bucket.
func (t *Table) Take(ns, name string, req Request, tn int64) (Decision, string) {
	t.mu.Lock()
	b, ev, reason := t.lookup(ns, name, tn, req.Tokens, false)
	if b == nil {
		t.mu.Unlock()
		return Decision{Status: Rejected, Reason: reason}, ""
	}
	d := t.decide(b, ev, req, tn)
	t.mu.Unlock()
	return d, b.key
}

// Report charges tokens to bucket name of namespace ns, used at tn
// (post-accounting). It never refuses and never blocks: a token bucket
// goes into debt of at most max_debt of fill time, the other algorithms
// at most to "drained at now" (a full window); the excess is forgiven.
// It errs only when no bucket answers or tokens is negative.
func (t *Table) Report(ns, name string, tokens int64, tn int64) error {
	if tokens < 0 {
		return fmt.Errorf("report %s:%s: tokens %d must not be negative", clip(ns), clip(name), tokens)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ev, reason := t.lookup(ns, name, tn, tokens, true)
	if b == nil {
		why := reason
		switch reason {
		case ReasonNoBucket:
			why += ": no bucket answers it (its namespace has none for it, and there is no global default bucket)"
		case ReasonTooManyBuckets:
			why += ": its namespace holds as many dynamic buckets as it may"
		}
		return fmt.Errorf("report %s:%s: %s", clip(ns), clip(name), why)
	}
	tt := max(tn, b.mark)
	b.mark = tt
	b.advance(tt)
	b.charge(tokens, tt)
	ev.Reported += uint64(tokens)
	return nil
}

// lookup finds or creates the bucket answering ns:name, with the events
// to count into; b is nil with the reason (counted) when none does. A
// dynamic bucket is created only for a take or report that will change
// it (tokens > 0, and for a take within max_tokens_per_request): peeks
// and refused requests are answered from a new bucket that is not kept,
// so bad input cannot fill the namespace's cap.
func (t *Table) lookup(ns, name string, now, tokens int64, report bool) (b *bucket, ev *Events, reason string) {
	sp := t.spaces[ns]
	if sp == nil {
		sp = t.spaces[GlobalDefault]
		return t.global(&sp.ev, now)
	}
	ev = &sp.ev
	if b = sp.buckets[name]; b != nil {
		return b, ev, ""
	}
	if c := sp.named[name]; c != nil {
		return t.create(sp, c, name, false, now), ev, ""
	}
	if sp.dyn != nil {
		switch {
		case !ValidName(name):
			ev.BadRequest++
			return nil, ev, ReasonBadRequest
		case sp.maxDyn > 0 && sp.dynamic >= sp.maxDyn:
			ev.TooManyBuckets++
			return nil, ev, ReasonTooManyBuckets
		}
		if tokens <= 0 || !report && tokens > sp.dyn.maxTokens {
			b = &bucket{key: sp.name + ":" + name}
			b.reset(sp.dyn, now, t.hasSince, t.since)
			return b, ev, ""
		}
		ev.DynamicCreated++
		sp.dynamic++
		return t.create(sp, sp.dyn, name, true, now), ev, ""
	}
	if sp.def != nil {
		if sp.defB == nil {
			sp.defB = t.create(nil, sp.def, ns+":"+DefaultBucketName, false, now)
		}
		return sp.defB, ev, ""
	}
	return t.global(ev, now)
}

// global returns the global default bucket, counting into ev.
func (t *Table) global(ev *Events, now int64) (*bucket, *Events, string) {
	g := t.spaces[GlobalDefault]
	if g.def == nil {
		ev.BucketMiss++
		return nil, ev, ReasonNoBucket
	}
	if g.defB == nil {
		g.defB = t.create(nil, g.def, GlobalDefault+":"+DefaultBucketName, false, now)
	}
	return g.defB, ev, ""
}

// create makes a bucket and, when sp is set, files it under name; else
// name is the full key.
func (t *Table) create(sp *space, c *compiled, name string, dynamic bool, now int64) *bucket {
	b := &bucket{dynamic: dynamic}
	b.reset(c, now, t.hasSince, t.since)
	if sp == nil {
		b.key = name
	} else {
		b.key = sp.name + ":" + name
		sp.buckets[b.key[len(sp.name)+1:]] = b
	}
	t.alive++
	return b
}

// Sweep drops dynamic buckets unused for their max_idle (never when it
// is 0), but only once their state equals a new bucket's (a token bucket
// full again, a window empty), so recreating one admits nothing more. It
// also forgets ban trackers that hold nothing. It returns how many
// buckets it dropped.
func (t *Table) Sweep(tn int64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	dropped := 0
	for _, sp := range t.spaces {
		for name, b := range sp.buckets {
			if !b.dynamic || b.c.idle == 0 || tn-b.mark < b.c.idle || tn < b.freshAt() {
				continue
			}
			delete(sp.buckets, name)
			sp.dynamic--
			sp.ev.Removed++
			t.alive--
			dropped++
		}
	}
	for k, st := range t.bans {
		if tn >= st.expire {
			delete(t.bans, k)
		}
	}
	return dropped
}

// Events returns a copy of the counters of every configured namespace
// (and "_default", which counts unknown namespaces).
func (t *Table) Events() map[string]Events {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := make(map[string]Events, len(t.spaces))
	for k, sp := range t.spaces {
		m[k] = sp.ev
	}
	return m
}

// Len returns how many buckets are alive.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.alive
}
