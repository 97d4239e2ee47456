package quotaserver

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/wire"
)

// shadowCounts counts the takes answered OK in shadow mode that their
// bucket did not let proceed at once (REJECTED or OK_WAIT), in all and per
// configured namespace.
type shadowCounts struct {
	total atomic.Uint64
	mu    sync.Mutex
	byNS  map[string]uint64
}

// shadow turns d, the decision for take t answered by bucket matched,
// into its shadow-mode answer when the server or the bucket's namespace
// is in shadow mode, and counts it.
func (s *Server) shadow(t *wire.QuotaTake, d quota.Decision, matched string) quota.Decision {
	// The namespace whose bucket answered; for no_bucket, the request's,
	// if it is configured (an unconfigured name must not become a key).
	ns, _, found := strings.Cut(matched, ":")
	if !found {
		ns = t.Namespace
	}
	var cfgNS *quota.Namespace
	if cfg := s.cfg.Load(); cfg != nil {
		cfgNS = cfg.Namespaces[ns]
	}
	if !s.opts.Shadow && (cfgNS == nil || !cfgNS.Shadow) {
		return d
	}
	d = d.Shadowed()
	if !d.WouldRefuse() {
		return d
	}
	s.shadowed.total.Add(1)
	if cfgNS != nil {
		s.shadowed.mu.Lock()
		if s.shadowed.byNS == nil {
			s.shadowed.byNS = make(map[string]uint64)
		}
		s.shadowed.byNS[ns]++
		s.shadowed.mu.Unlock()
	}
	return d
}

// counts returns the total and a copy of the per-namespace counts.
func (c *shadowCounts) counts() (uint64, map[string]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total.Load(), maps.Clone(c.byNS)
}
