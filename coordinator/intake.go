package coordinator

import (
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/wire"
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
	mu    sync.RWMutex
	until map[string]int64 // the end of the client's latest lease, unix ns
	max   int
}

func newHolders(max int) *holders { return &holders{until: map[string]int64{}, max: max} }

func holderKey(subject, client string) string {
	tenant := ""
	if strings.HasPrefix(subject, wire.TenantPrefix) {
		tenant = wire.TenantOf(subject)
	}
	return tenant + "\x00" + client
}

// classify sorts a request before it is decoded: a holder's first.
func (h *holders) classify(subject string, hdr nats.Header) leader.Class {
	id := hdr.Get(leader.HeaderClient)
	if id == "" {
		return leader.ClassNewcomer
	}
	h.mu.RLock()
	_, ok := h.until[holderKey(subject, id)]
	h.mu.RUnlock()
	if ok {
		return leader.ClassKnown
	}
	return leader.ClassNewcomer
}

// hold records that the client of a request on subject holds a lease
// until (unix ns).
func (h *holders) hold(subject, client string, until int64) {
	k := holderKey(subject, client)
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.until[k]; !ok && len(h.until) >= h.max {
		return
	}
	h.until[k] = max(h.until[k], until)
}

// holderGrace is how long a client is still known after its last lease
// ended.
const holderGrace = time.Minute

// sweep forgets the clients whose leases all ended holderGrace ago.
func (h *holders) sweep(now int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, u := range h.until {
		if u+int64(holderGrace) < now {
			delete(h.until, k)
		}
	}
}
