package envoyrl

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Store holds the window counters. The reference keeps them in Redis;
// allot's servers keep them in their quota partitions; tests and a
// single process use MemoryStore.
type Store interface {
	// Increment adds each Increment's hits to its counter, in order (a
	// key may appear twice), and returns each counter's value right after
	// its own addition. A counter not seen yet, or past its expiry, starts
	// at zero. An addition that would take a counter past 2^63-1 fails
	// the call, as Redis's INCRBY does.
	Increment(ctx context.Context, now time.Time, incs []Increment) ([]uint64, error)
	// Get returns each key's counter (zero when absent or expired).
	Get(ctx context.Context, now time.Time, keys []string) ([]uint64, error)
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
}

// MemoryStore is a Store in process memory. Expired counters are dropped
// as time passes. The zero value is ready to use.
type MemoryStore struct {
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
// addition changes no counter.
func (s *MemoryStore) Increment(_ context.Context, now time.Time, incs []Increment) ([]uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	out := make([]uint64, len(incs))
	pending := make(map[string]uint64, len(incs))
	for i, inc := range incs {
		cur, ok := pending[inc.Key]
		if !ok {
			cur = s.value(now, inc.Key)
		}
		if inc.Hits > math.MaxInt64 || cur > math.MaxInt64-inc.Hits {
			return nil, fmt.Errorf("counter %q: adding %d to %d would overflow", inc.Key, inc.Hits, cur)
		}
		pending[inc.Key] = cur + inc.Hits
		out[i] = cur + inc.Hits
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
func (s *MemoryStore) Get(_ context.Context, now time.Time, keys []string) ([]uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint64, len(keys))
	for i, k := range keys {
		out[i] = s.value(now, k)
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
