package wire

import (
	"hash/maphash"
	"sync/atomic"
)

// idSlots is the number of strings an IDCache keeps (a power of two), and
// maxCachedID the longest id it keeps: resource ids are few and short.
const (
	idSlots     = 1024
	maxCachedID = 128
)

// IDCache hands the lease decoders (its Name is a Names) the resource
// ids it has seen before instead of a new string for every request: a
// node serves few resources, each named in every refresh of every
// client. It is safe for decoders on several goroutines, takes no lock
// and keeps at most idSlots strings, one per slot of their hash; a slot
// holds the last id that hashed to it.
type IDCache struct {
	seed  maphash.Seed
	slots [idSlots]atomic.Pointer[string]
}

// NewIDCache returns an empty cache.
func NewIDCache() *IDCache { return &IDCache{seed: maphash.MakeSeed()} }

// Name returns a string equal to b: the cache's if it has one.
func (c *IDCache) Name(b []byte) string {
	if len(b) > maxCachedID {
		return string(b)
	}
	slot := &c.slots[maphash.Bytes(c.seed, b)&(idSlots-1)]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
