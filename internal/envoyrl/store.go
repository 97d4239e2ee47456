package envoyrl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Store holds the window counters. The reference keeps them in Redis;
// allot's servers keep them in their quota partitions; tests and a
// single process use MemoryStore. Every Increment of one call has the
// same Domain.
type Store interface {
	// Increment adds each Increment's hits to its counter, in order (a
	// key may appear twice), and returns each counter's value right after
	// its own addition. A counter not seen yet, or past its expiry, starts
	// at zero. An addition that would take a counter past 2^63-1 fails
	// the call, as Redis's INCRBY does.
	Increment(ctx context.Context, now time.Time, incs []Increment) ([]uint64, error)
	// Get returns each Increment's counter (zero when absent or expired)
	// and adds nothing: the Hits are ignored.
	Get(ctx context.Context, now time.Time, incs []Increment) ([]uint64, error)
}

// Increment is one counter addition.
type Increment struct {
	// Key names the counter: domain, entries and window start, built as
	// the reference builds its Redis keys.
	Key string
	// Hits is what to add; zero only reads the counter.
	Hits uint64
	// Expires is when the counter's window ends; the counter is useless
	// after it, since the next window has another key.
	Expires time.Time
	// Domain, Entries and Limit say what the counter counts, for a Store
	// that routes counters or decides some on its own terms (allot's
	// servers route a domain's counters to its partition, and its sidecar
	// answers some from leases): the request's domain, the descriptor's
	// entries as the key names them (the share_threshold pattern in place
	// of a value it covers), and the limit's requests_per_unit.
	Domain  string
	Entries []Entry
	Limit   uint32
}

// Entry is one descriptor entry as a counter names it.
type Entry struct {
	Key, Value string
}

// ErrStoreFull is why a MemoryStore at its MaxCounters refuses an
// addition that would add a counter.
var ErrStoreFull = errors.New("the store holds its most counters")

// MemoryStore is a Store in process memory. Expired counters are dropped
// as time passes. The zero value is ready to use.
type MemoryStore struct {
	// MaxCounters, if above zero, bounds the counters kept: an Increment
	// that would add one beyond it fails with ErrStoreFull and changes
	// nothing. Expired counters count until they are swept (at most a
	// second after their expiry, as requests arrive).
	MaxCounters int

	mu       sync.Mutex
	counters map[string]memCounter
	// nextSweep is when expired counters are next looked for.
	nextSweep time.Time
}

type memCounter struct {
	value   uint64
	expires time.Time
}

var _ Store = (*MemoryStore)(nil)

// Increment implements Store. It is all or nothing: an overflowing
// addition, or one beyond MaxCounters, changes no counter.
func (s *MemoryStore) Increment(_ context.Context, now time.Time, incs []Increment) ([]uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	out := make([]uint64, len(incs))
	pending := make(map[string]uint64, len(incs))
	added := 0
	for i, inc := range incs {
		cur, ok := pending[inc.Key]
		if !ok {
			if _, kept := s.counters[inc.Key]; !kept {
				added++
			}
			cur = s.value(now, inc.Key)
		}
		if inc.Hits > math.MaxInt64 || cur > math.MaxInt64-inc.Hits {
			return nil, fmt.Errorf("counter %q: adding %d to %d would overflow", inc.Key, inc.Hits, cur)
		}
		pending[inc.Key] = cur + inc.Hits
		out[i] = cur + inc.Hits
	}
	if s.MaxCounters > 0 && added > 0 && len(s.counters)+added > s.MaxCounters {
		return nil, fmt.Errorf("adding %d counters to %d: %w", added, len(s.counters), ErrStoreFull)
	}
	if s.counters == nil {
		s.counters = make(map[string]memCounter)
	}
	for _, inc := range incs {
		c := s.counters[inc.Key]
		c.value = pending[inc.Key]
		if inc.Expires.After(c.expires) || !now.Before(c.expires) {
			c.expires = inc.Expires
		}
		s.counters[inc.Key] = c
	}
	return out, nil
}

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, now time.Time, incs []Increment) ([]uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint64, len(incs))
	for i, inc := range incs {
		out[i] = s.value(now, inc.Key)
	}
	return out, nil
}

// Len returns how many counters the store holds, expired ones included
// until the next sweep.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.counters)
}

func (s *MemoryStore) value(now time.Time, key string) uint64 {
	c, ok := s.counters[key]
	if !ok || !now.Before(c.expires) {
		return 0
	}
	return c.value
}

// sweep drops expired counters, at most once a second of the caller's
// clock, so that a steady stream of requests costs no full scan each.
func (s *MemoryStore) sweep(now time.Time) {
	if now.Before(s.nextSweep) {
		return
	}
	s.nextSweep = now.Add(time.Second)
	for k, c := range s.counters {
		if !now.Before(c.expires) {
			delete(s.counters, k)
		}
	}
}
