package coordinator

import (
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

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
	// Only the round loop writes it; classify reads it beside.
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

// classify sorts a request before it is decoded: a holder's first.
func (h *holders) classify(subject string, hdr nats.Header) leader.Class {
	id := hdr.Get(leader.HeaderClient)
	if id == "" {
		return leader.ClassNewcomer
	}
	if _, ok := h.lookup(subject, id); ok {
		return leader.ClassKnown
	}
	return leader.ClassNewcomer
}

// lookup returns the end of the latest lease of client on subject, if it
// is a holder.
func (h *holders) lookup(subject, client string) (int64, bool) {
	var buf [128]byte
	fp := h.set.fingerprint(appendHolderKey(buf[:0], subject, client))
	h.mu.RLock()
	defer h.mu.RUnlock()
	if i := h.set.find(fp); i >= 0 {
		return h.set.slots[i].until, true
	}
	return 0, false
}

// hold records that the client of a request on subject holds a lease
// until (unix ns). Only the round loop calls it (and sweep), so only the
// round loop writes the table: a known client's refresh moves its lease
// end under the read lock, beside the intake's classify (which reads
// only the fingerprints).
func (h *holders) hold(subject, client string, until int64) {
	var buf [128]byte
	fp := h.set.fingerprint(appendHolderKey(buf[:0], subject, client))
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
// reports whether fp is in the table.
func (h *holders) moveUntil(fp uint64, until int64) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
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
