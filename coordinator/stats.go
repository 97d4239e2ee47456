package coordinator

import "time"

// stats are kept by the round loop and published in micro STATS.
type stats struct {
	rounds        uint64
	requests      uint64
	lastRound     time.Duration
	maxRound      time.Duration
	horizonErrors uint64
	recordWrites  uint64
	errors        uint64 // error replies sent by rounds (not in micro's counts)
}

func (s *stats) round(n int, d time.Duration) {
	s.rounds++
	s.requests += uint64(n)
	s.lastRound = d
	s.maxRound = max(s.maxRound, d)
}

// Stats is the coordinator's entry in the micro STATS "data" field.
type Stats struct {
	Node          string  `json:"node"`
	ServerID      string  `json:"server_id"`
	Term          uint64  `json:"term"`
	Rounds        uint64  `json:"rounds"`
	Requests      uint64  `json:"requests"`
	LastRoundMS   float64 `json:"last_round_ms"`
	MaxRoundMS    float64 `json:"max_round_ms"`
	HorizonErrors uint64  `json:"horizon_errors"`
	RecordWrites  uint64  `json:"record_writes"`
	// RoundErrors counts error replies sent by rounds (e.g. 404 for an
	// unmatched resource). Errors found while decoding are in micro's own
	// num_errors instead.
	RoundErrors uint64 `json:"round_errors"`
	Config      any    `json:"config,omitempty"`
}

// statsData is called by micro on a STATS request, from another goroutine:
// it reads only the word-sized counters (a torn read shows a stale figure).
func (c *Coordinator) statsData() any {
	c.mu.Lock()
	s := c.statsSnap
	c.mu.Unlock()
	out := Stats{
		Node: c.opts.Node, ServerID: c.opts.ServerID, Term: c.Term(),
		Rounds: s.rounds, Requests: s.requests,
		LastRoundMS: float64(s.lastRound) / 1e6, MaxRoundMS: float64(s.maxRound) / 1e6,
		HorizonErrors: s.horizonErrors, RecordWrites: s.recordWrites, RoundErrors: s.errors,
	}
	if st, ok := c.opts.Templates.(StatusSource); ok {
		out.Config = st.Status()
	}
	return out
}
