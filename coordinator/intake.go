package coordinator

import (
	"strings"
	"sync"
	"time"

	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/subjects"
)

// holders are the clients this coordinator answered with a lease, until
// holderGrace after the last one ends (a client whose lease lapsed in a
// flood must not then queue behind it): their refreshes go before
// newcomers' in the intake
// (leader.ClassKnown). An agent that holds a lease says so with its
// client id in the Allot-Client header; a request whose header names a
// client other than its body is refused (decode), so that a flood cannot
// borrow a holder's place without speaking for that holder. Keyed by
// tenant (empty on the plain subjects) and client id, through their
// fingerprint (see holderSet), at most max.
type holders struct {
	mu sync.RWMutex
	// set holds, per key, the end of the client's latest lease (unix ns).
	// Only the round loop writes it (the fingerprints under mu); classify
	// reads the fingerprints beside, under the read lock.
	set holderSet
	max int
}

func newHolders(max int) *holders { return &holders{set: newHolderSet(), max: max} }

// appendHolderKey appends the key of client on subject to b: the tenant
// (empty on the plain subjects), a zero byte and the client id.
func appendHolderKey(b []byte, subject, client string) []byte {
	if strings.HasPrefix(subject, subjects.TenantPrefix) {
		b = append(b, subjects.TenantOf(subject)...)
	}
	b = append(b, 0)
	return append(b, client...)
}

// fingerprint returns the fingerprint of client's key on subject. The
// seed never changes, so it needs no lock.
func (h *holders) fingerprint(subject, client string) uint64 {
	var buf [128]byte
	return h.set.fingerprint(appendHolderKey(buf[:0], subject, client))
}

// classify sorts a request before it is decoded: a holder's first.
func (h *holders) classify(subject, id string) leader.Class {
	if id == "" {
		return leader.ClassNewcomer
	}
	if h.known(subject, id) {
		return leader.ClassKnown
	}
	return leader.ClassNewcomer
}

// known reports whether client on subject is a holder. It reads only
// the fingerprints: the lease ends move under the read lock (moveUntil).
func (h *holders) known(subject, client string) bool {
	fp := h.fingerprint(subject, client)
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.set.find(fp) >= 0
}

// hold records that the client of a request on subject holds a lease
// until (unix ns). Only the round loop calls it (and sweep), so only the
// round loop writes the table: a known client's refresh moves its lease
// end without a lock (moveUntil), beside the intake's classify (which
// reads only the fingerprints, under the read lock).
func (h *holders) hold(subject, client string, until int64) {
	fp := h.fingerprint(subject, client)
	if h.moveUntil(fp, until) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.set.n >= h.max {
		return
	}
	h.set.insert(fp, until)
}

// moveUntil moves the lease end of fp to until if that is later, and
// reports whether fp is in the table. It takes no lock: only the round
// loop, its one caller, writes the table (so its own reads need none),
// and the lease ends it writes are read by no other goroutine (classify
// reads the fingerprints only). It runs for every reply.
func (h *holders) moveUntil(fp uint64, until int64) bool {
	i := h.set.find(fp)
	if i >= 0 {
		u := &h.set.slots[i].until
		*u = max(*u, until)
	}
	return i >= 0
}

// holderGrace is how long a client is still known after its last lease
// ended.
const holderGrace = time.Minute

// sweep forgets the clients whose leases all ended holderGrace ago.
func (h *holders) sweep(now int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.set.removeIf(func(until int64) bool { return until+int64(holderGrace) < now })
}
