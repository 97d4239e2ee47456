package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/wire"
)

// LeasePrefix starts the lease resource of every Envoy descriptor, and the
// identifier_glob of every template that maps descriptors to leases.
const LeasePrefix = "envoy/"

// LeaseResource is the lease resource of a descriptor's counter:
// envoy/<domain>/<key>=<value>/..., one segment per entry, with the
// share_threshold pattern in place of a value it covers. Descriptors that
// share a counter in the reference share a resource. ok is false when the
// name is not a valid resource id (over 256 bytes, a space or control
// character): such a descriptor is never answered from a lease.
func LeaseResource(domain string, entries []envoyrl.Entry) (id string, ok bool) {
	var b strings.Builder
	b.WriteString(LeasePrefix)
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('/')
		b.WriteString(e.Key)
		b.WriteByte('=')
		b.WriteString(e.Value)
	}
	id = b.String()
	return id, wire.ValidateID("resource id", id) == nil
}

// LeaseTemplate returns the template that maps lease resource id to a
// lease: the one set matches it with, if its identifier_glob starts with
// LeasePrefix. Nil means the descriptor is counted in the partitions: no
// template names it (the fallback and catch-all globs such as "*" do not
// count), or a refusal wins it.
func LeaseTemplate(set *config.Set, id string) *config.Template {
	t := set.Match(id)
	if t == nil || t == set.Fallback() || !strings.HasPrefix(t.Glob, LeasePrefix) {
		return nil
	}
	return t
}

// Defaults of LeaseStoreOptions.
const (
	// DefaultMaxLeases bounds the lease resources a sidecar holds.
	DefaultMaxLeases = 10000
	// DefaultLeaseIdle is how long a lease resource unused is kept.
	DefaultLeaseIdle = 5 * time.Minute
)

// LeaseStoreOptions configure a LeaseStore.
type LeaseStoreOptions struct {
	// Conn is the NATS connection of the store's agent. Required.
	Conn *nats.Conn
	// Agent are the options of the store's agent (node, client id, mode,
	// logger). Its OnChange is the store's.
	Agent []agent.Option
	// Templates returns the templates in force (a watcher's Current): they
	// say which descriptors are answered from leases. Required.
	Templates func() *config.Set
	// Central counts the descriptors no lease answers (an
	// envoyserver.Router). Required.
	Central envoyrl.Store
	// MaxLeases bounds the lease resources held at once; descriptors
	// beyond are counted centrally. Default DefaultMaxLeases.
	MaxLeases int
	// Idle is how long a lease resource unused is kept before it is
	// released. Default DefaultLeaseIdle.
	Idle time.Duration
	// Logger receives the store's logs. Default slog.Default().
	Logger *slog.Logger
}

// LeaseStore is the Store of the sidecar (`allot agent --rls-addr`): a
// descriptor whose lease resource (LeaseResource) a template maps to a
// lease (LeaseTemplate) is decided by this process's share of that
// resource, in process, with no network hop; the others are counted
// centrally. A descriptor's first requests, until its first lease
// arrives, are counted centrally too.
//
// A lease is a rate, not a window: a lease-mapped descriptor is admitted
// while its token bucket (the agent's RateLimiter, filled at the leased
// rate) has the hits, and reports as remaining the whole tokens left, at
// most its requests_per_unit. Refused hits take no tokens.
type LeaseStore struct {
	opts  LeaseStoreOptions
	agent *agent.Agent
	log   *slog.Logger

	mu      sync.Mutex
	entries map[string]*leaseEntry
	full    bool // logged that MaxLeases was reached

	stop chan struct{}
	done chan struct{}
}

// leaseEntry is one descriptor counter's lease state.
type leaseEntry struct {
	id string
	// gen and mapped: whether the templates of generation gen map it.
	gen    atomic.Uint64
	mapped atomic.Bool
	lim    atomic.Pointer[agent.RateLimiter] // nil until first mapped
	leased atomic.Bool                       // the agent holds a lease for it
	used   atomic.Int64                      // unix ns of the last use
}

// NewLeaseStore starts the store's agent; Close it.
func NewLeaseStore(opts LeaseStoreOptions) (*LeaseStore, error) {
	if opts.Conn == nil || opts.Templates == nil || opts.Central == nil {
		return nil, errors.New("rls: LeaseStoreOptions needs Conn, Templates and Central")
	}
	if opts.MaxLeases == 0 {
		opts.MaxLeases = DefaultMaxLeases
	}
	if opts.Idle == 0 {
		opts.Idle = DefaultLeaseIdle
	}
	if opts.MaxLeases < 0 || opts.Idle < 0 {
		return nil, fmt.Errorf("rls: MaxLeases %d and Idle %v must not be negative", opts.MaxLeases, opts.Idle)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &LeaseStore{opts: opts, log: opts.Logger, entries: map[string]*leaseEntry{}, stop: make(chan struct{}), done: make(chan struct{})}
	a, err := agent.New(opts.Conn, append(append([]agent.Option{}, opts.Agent...), agent.WithOnChange(s.onChange))...)
	if err != nil {
		return nil, err
	}
	s.agent = a
	go s.janitor()
	return s, nil
}

// Agent is the store's agent: its leases answer the lease-mapped
// descriptors, and any resource the sidecar's HTTP endpoint is asked for.
func (s *LeaseStore) Agent() *agent.Agent { return s.agent }

// Close releases the leases and stops the agent.
func (s *LeaseStore) Close() error {
	close(s.stop)
	<-s.done
	return s.agent.Close()
}

// onChange tracks which resources hold a lease; the agent calls it from
// its loop.
func (s *LeaseStore) onChange(st agent.Status) {
	s.mu.Lock()
	e := s.entries[st.ResourceID]
	s.mu.Unlock()
	if e != nil {
		e.leased.Store(st.Source == agent.SourceLease)
	}
}

// janitor releases the lease resources unused for Idle.
func (s *LeaseStore) janitor() {
	defer close(s.done)
	tk := time.NewTicker(min(s.opts.Idle/2+time.Millisecond, time.Minute))
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
		}
		idle := time.Now().Add(-s.opts.Idle).UnixNano()
		var closing []*leaseEntry
		s.mu.Lock()
		for id, e := range s.entries {
			if e.used.Load() < idle {
				delete(s.entries, id)
				closing = append(closing, e)
			}
		}
		s.full = false
		s.mu.Unlock()
		for _, e := range closing {
			if lim := e.lim.Load(); lim != nil {
				s.release(e.id, lim)
			}
		}
	}
}

// release closes lim, giving its lease back.
func (s *LeaseStore) release(id string, lim *agent.RateLimiter) {
	if err := lim.Close(); err != nil {
		s.log.Debug("releasing a lease", "resource", id, "err", err)
	}
}

// entry returns the lease state of inc's counter when a template maps it
// to a lease, else nil.
func (s *LeaseStore) entry(inc envoyrl.Increment, set *config.Set) *leaseEntry {
	id, ok := LeaseResource(inc.Domain, inc.Entries)
	if !ok {
		return nil
	}
	s.mu.Lock()
	e := s.entries[id]
	if e == nil {
		if len(s.entries) >= s.opts.MaxLeases {
			if !s.full {
				s.full = true
				s.log.Warn("the sidecar holds its most lease resources; more descriptors are counted centrally until some are idle", "max", s.opts.MaxLeases)
			}
			s.mu.Unlock()
			return nil
		}
		e = &leaseEntry{id: id}
		s.entries[id] = e
	}
	s.mu.Unlock()
	e.used.Store(time.Now().UnixNano())
	if gen := set.Generation + 1; e.gen.Load() != gen {
		mapped := LeaseTemplate(set, id) != nil
		e.mapped.Store(mapped)
		e.gen.Store(gen)
		if lim := e.lim.Load(); !mapped && lim != nil && e.lim.CompareAndSwap(lim, nil) {
			// No longer a lease: give it back (Close waits for the agent's
			// loop, so not here).
			e.leased.Store(false)
			go s.release(id, lim)
		}
	}
	if !e.mapped.Load() {
		return nil
	}
	if e.lim.Load() == nil {
		// Rate returns the same limiter for the same id.
		lim, err := s.agent.Rate(id)
		if err != nil {
			s.log.Warn("no lease for a descriptor; counting it centrally", "resource", id, "err", err)
			return nil
		}
		e.lim.Store(lim)
	}
	return e
}

// split sorts incs into those a lease answers (leased, with their
// entries) and the others, to count centrally.
func (s *LeaseStore) split(incs []envoyrl.Increment) (leased []*leaseEntry, central []int) {
	set := s.opts.Templates()
	leased = make([]*leaseEntry, len(incs))
	for i, inc := range incs {
		e := s.entry(inc, set)
		if e != nil && e.leased.Load() {
			leased[i] = e
			continue
		}
		if e != nil {
			// Before its first lease: demand tells the agent what to ask
			// for; the answer is the partitions'.
			e.lim.Load().AllowN(hitsOf(inc.Hits))
		}
		central = append(central, i)
	}
	return leased, central
}

// Increment implements envoyrl.Store.
func (s *LeaseStore) Increment(ctx context.Context, now time.Time, incs []envoyrl.Increment) ([]uint64, error) {
	return s.count(ctx, now, incs, false)
}

// Get implements envoyrl.Store.
func (s *LeaseStore) Get(ctx context.Context, now time.Time, incs []envoyrl.Increment) ([]uint64, error) {
	return s.count(ctx, now, incs, true)
}

func (s *LeaseStore) count(ctx context.Context, now time.Time, incs []envoyrl.Increment, readOnly bool) ([]uint64, error) {
	leased, central := s.split(incs)
	out := make([]uint64, len(incs))
	// The partitions first: if they fail, no lease token was taken.
	if len(central) > 0 {
		sub := make([]envoyrl.Increment, len(central))
		for j, i := range central {
			sub[j] = incs[i]
		}
		var vals []uint64
		var err error
		if readOnly {
			vals, err = s.opts.Central.Get(ctx, now, sub)
		} else {
			vals, err = s.opts.Central.Increment(ctx, now, sub)
		}
		if err != nil {
			return nil, err
		}
		for j, i := range central {
			out[i] = vals[j]
		}
	}
	for i, e := range leased {
		if e == nil {
			continue
		}
		limit := uint64(incs[i].Limit)
		lim := e.lim.Load()
		if !readOnly && !lim.AllowN(hitsOf(incs[i].Hits)) {
			out[i] = limit + 1 // over the limit
			continue
		}
		left := uint64(0)
		if t := lim.Tokens(); t >= 1 {
			left = uint64(min(t, float64(math.MaxUint32)))
		}
		out[i] = limit - min(left, limit)
	}
	return out, nil
}

// hitsOf is hits as AllowN takes them.
func hitsOf(h uint64) int { return int(min(h, math.MaxInt32)) }

// Leases reports how many lease resources the store tracks, and how many
// of them hold a lease.
func (s *LeaseStore) Leases() (tracked, leased int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.leased.Load() {
			leased++
		}
	}
	return len(s.entries), leased
}
