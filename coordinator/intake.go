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
// tenant (empty on the plain subjects) and client id, at most max.
type holders struct {
	mu sync.RWMutex
	// until is the end of the client's latest lease, unix ns. The values
	// are pointers so that a refresh moves it without storing the key
	// again: the key is then looked up from a buffer, not allocated.
	until map[string]*int64
	max   int
}

func newHolders(max int) *holders { return &holders{until: map[string]*int64{}, max: max} }

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
	var buf [128]byte
	if h.lookup(appendHolderKey(buf[:0], subject, id)) != nil {
		return leader.ClassKnown
	}
	return leader.ClassNewcomer
}

// lookup returns the value of key k, or nil.
func (h *holders) lookup(k []byte) *int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.until[string(k)]
}

// hold records that the client of a request on subject holds a lease
// until (unix ns). Only the round loop calls it (and sweep), so only the
// round loop reads or writes the values: a known client's refresh moves
// its value under the read lock, beside the intake's classify.
func (h *holders) hold(subject, client string, until int64) {
	var buf [128]byte
	k := appendHolderKey(buf[:0], subject, client)
	if u := h.lookup(k); u != nil {
		*u = max(*u, until)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.until) >= h.max {
		return
	}
	u := until // on the heap only here, not on every call
	h.until[string(k)] = &u
}

// holderGrace is how long a client is still known after its last lease
// ended.
const holderGrace = time.Minute

// sweep forgets the clients whose leases all ended holderGrace ago.
func (h *holders) sweep(now int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, u := range h.until {
		if *u+int64(holderGrace) < now {
			delete(h.until, k)
		}
	}
}
