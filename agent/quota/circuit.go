package quota

import (
	"cmp"
	"slices"
	"time"

	"github.com/allot/allot/agent"
)

// maxNamespaces bounds the per-namespace circuit state; beyond it a
// namespace is still decided, without a circuit of its own.
const maxNamespaces = 1024

// Status describes one namespace's circuit as the client sees it.
type Status struct {
	// Namespace names it.
	Namespace string
	// Fallback is the rate per second of the namespace's local fallback
	// bucket (WithFallback), 0 without one.
	Fallback float64
	// LastAnswer is the time of the last answer from the quota service;
	// LastError the last failure to get one since then, or nil.
	LastAnswer time.Time
	LastError  error
	// Failures counts the consecutive requests the quota service did not
	// answer. At WithCircuit's threshold CircuitOpen is set: Take decides
	// locally without asking until CircuitRetry, when one request probes
	// the service again.
	Failures     int
	CircuitOpen  bool
	CircuitRetry time.Time
	// Shadow says that the last answer was in shadow mode; ShadowAdmitted
	// counts the tokens answered OK in shadow mode and WouldRefuse those
	// of them its bucket refused or made wait. Both only grow.
	Shadow         bool
	ShadowAdmitted uint64
	WouldRefuse    uint64
}

// namespace is one namespace's circuit. Guarded by Client.mu.
type namespace struct {
	name      string
	failures  int       // consecutive unanswered requests
	openUntil time.Time // zero while the circuit is closed
	probing   bool      // one request is probing an open circuit
	lastOK    time.Time
	lastErr   error
	shadow    shadowCounts
}

// shadowCounts counts a namespace's shadow-mode answers.
type shadowCounts struct {
	last     bool   // the last answer was in shadow mode
	admitted uint64 // tokens answered OK in shadow mode
	would    uint64 // of those, tokens the bucket refused or made wait
}

// admit returns ns's circuit (nil beyond maxNamespaces) and whether to ask
// the service: not while the circuit is open, except for one probe once
// the cooldown is over.
func (c *Client) admit(ns string, t time.Time) (*namespace, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false, agent.ErrClosed
	}
	st := c.ns[ns]
	if st == nil {
		if len(c.ns) >= maxNamespaces {
			return nil, true, nil
		}
		st = &namespace{name: ns}
		c.ns[ns] = st
	}
	switch {
	case st.openUntil.IsZero():
		return st, true, nil
	case t.Before(st.openUntil) || st.probing:
		return st, false, nil
	}
	st.probing = true
	return st, true, nil
}

// answered closes st's circuit: the service answered.
func (c *Client) answered(st *namespace, t time.Time) {
	if st == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !st.openUntil.IsZero() {
		c.log.Info("allot: quota service answers again; circuit closed", "namespace", st.name)
	}
	st.failures, st.openUntil, st.probing = 0, time.Time{}, false
	st.lastOK, st.lastErr = t, nil
}

// abandoned ends a probe whose caller gave up before the answer.
func (c *Client) abandoned(st *namespace) {
	if st == nil {
		return
	}
	c.mu.Lock()
	st.probing = false
	c.mu.Unlock()
}

// failed counts a failure and opens st's circuit at the threshold, or
// again when a probe failed.
func (c *Client) failed(st *namespace, err error, t time.Time) {
	if st == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.failures++
	st.lastErr = err
	wasOpen := !st.openUntil.IsZero()
	if wasOpen || st.failures >= c.o.failures {
		st.openUntil = t.Add(c.o.cooldown)
		if !wasOpen {
			c.log.Warn("allot: quota service not answering; circuit open, deciding locally",
				"namespace", st.name, "failures", st.failures, "cooldown", c.o.cooldown, "error", err)
		}
	}
	st.probing = false
}

// noteShadow counts the answer res for n tokens in st's namespace.
func (c *Client) noteShadow(st *namespace, res Result, n int64) {
	if st == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.shadow.last = res.Shadow
	if !res.Shadow {
		return
	}
	st.shadow.admitted += uint64(max(n, 0))
	if res.WouldRefuse {
		st.shadow.would += uint64(max(n, 0))
	}
}

// Status describes every namespace Take was called for, ordered by name.
func (c *Client) Status() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Status, 0, len(c.ns))
	for _, st := range c.ns {
		s := Status{
			Namespace: st.name, LastAnswer: st.lastOK, LastError: st.lastErr,
			Failures: st.failures, CircuitOpen: !st.openUntil.IsZero(), CircuitRetry: st.openUntil,
			Shadow: st.shadow.last, ShadowAdmitted: st.shadow.admitted, WouldRefuse: st.shadow.would,
		}
		if b := c.fallbackFor(st.name); b != nil {
			s.Fallback = b.rate
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y Status) int { return cmp.Compare(x.Namespace, y.Namespace) })
	return out
}
