package coordinator

import (
	"time"

	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/status"
)

// stats are kept by the round loop and published in micro STATS.
type stats struct {
	rounds         uint64
	requests       uint64
	lastRound      time.Duration
	maxRound       time.Duration
	foreignRecords uint64 // stored records found not ours while serving
	errors         uint64 // error replies sent by rounds (not in micro's counts)
	expired        uint64 // requests dropped by rounds: their senders had gone
	ledger         ledger.Stats
	parentOK       time.Time
	parentErr      string
	top            []ledger.ResourceStat
	obs            // metrics (see observe.go)
}

func (s *stats) round(n int, d time.Duration) {
	s.rounds++
	s.requests += uint64(n)
	s.lastRound = d
	s.maxRound = max(s.maxRound, d)
	s.hist.observe(d)
}

// Stats is the coordinator's entry in the micro STATS "data" field.
type Stats struct {
	Node     string `json:"node"`
	ServerID string `json:"server_id"`
	Term     uint64 `json:"term"`
	// Partition and Partitions say which lease partition this
	// coordinator serves, when the node has more than one.
	Partition  int `json:"partition,omitempty"`
	Partitions int `json:"partitions,omitempty"`
	// Serving is false once the coordinator stopped serving on its own
	// (Failure says why) or was stopped.
	Serving     bool    `json:"serving"`
	Failure     string  `json:"failure,omitempty"`
	Rounds      uint64  `json:"rounds"`
	Requests    uint64  `json:"requests"`
	LastRoundMS float64 `json:"last_round_ms"`
	MaxRoundMS  float64 `json:"max_round_ms"`
	// HorizonErrors counts lease-record writes that failed.
	HorizonErrors uint64 `json:"horizon_errors"`
	RecordWrites  uint64 `json:"record_writes"`
	// RecordWaits counts resource rounds whose grants waited for a
	// lease-record write.
	RecordWaits uint64 `json:"record_waits"`
	// CutLeases counts leases cut short to the lease record: they ended
	// before a full lease length (zero-length ones included) because the
	// record's latest expiry for the resource, or its horizon, had not
	// been raised in time: its writes were too slow, or failed. Each
	// stretch of them is also logged (a warning at most every 10 s).
	CutLeases uint64 `json:"cut_leases"`
	// ForeignRecords counts stored lease records found not to be ours
	// while serving (deleted, edited, forged); each was written again.
	ForeignRecords uint64 `json:"foreign_records"`
	// ForgedRecords counts records ignored at takeover because their term
	// is above any the election can have issued.
	ForgedRecords uint64 `json:"forged_records"`
	// PriorityCapped counts requests served at their template's
	// max_priority (or their tenant's bound) instead of the higher
	// priority they asked for.
	PriorityCapped uint64 `json:"priority_capped"`
	// TenantCapped counts resources of requests refused (429) for a
	// tenant cap: tenants.max_clients or tenants.max_resources of a
	// template, or the node's caps per tenant (Options.TenantMaxResources,
	// TenantMaxClients).
	TenantCapped uint64 `json:"tenant_capped"`
	// ChildCapped counts child nodes' bands that claimed more clients
	// than the node's bound for them (Options.ChildMaxClients or
	// ChildClients); each was counted at the bound.
	ChildCapped uint64 `json:"child_capped"`
	// OverClaims counts clients that reported, in learning mode, holding
	// more than the predecessor's lease record allows; they were capped.
	OverClaims uint64 `json:"over_claims"`
	// Unheard counts claimants whose lease ended unrefreshed while they
	// had a floor (each now runs on its floor, if alive; a child node is
	// also logged), and Forgotten child nodes no longer counted once their
	// floor ended. top_resources says, per resource, how many claimants
	// are on their floor and, on a child node, which regime it is in.
	Unheard   uint64 `json:"unheard"`
	Forgotten uint64 `json:"forgotten"`
	// Silenced counts replies withheld because the coordinator may no
	// longer answer (stopped, deposed, leadership lapsed).
	Silenced  uint64 `json:"silenced"`
	Resources int    `json:"resources"`
	Clients   int    `json:"clients"`
	// RoundErrors counts error replies sent by rounds (e.g. 404 for an
	// unmatched resource). The intake's refusals (413, 429, 503) are in
	// Intake, and every error reply in Intake.Errors.
	RoundErrors uint64 `json:"round_errors"`
	// Intake is what the intake refused and dropped (subjects.md,
	// "Overload"); expired counts the requests dropped unanswered because
	// their senders had stopped waiting, in the intake or the round.
	Intake intake.Stats `json:"intake"`
	// Shadow is set when the coordinator runs every resource in shadow
	// mode (Options.Shadow).
	Shadow bool `json:"shadow,omitempty"`
	Config any  `json:"config,omitempty"`
	// Parent is the parent node (empty on a root). ParentError is set
	// while the parent cannot be reached: the node then serves on the
	// leases it holds, then on the safe capacity the parent told it.
	Parent string `json:"parent,omitempty"`
	// TopResources are the resources with the most outstanding (at most
	// topResources), refreshed every second: capacity (on a child node its
	// lease from the parent), outstanding and claimants each.
	TopResources []status.ResourceStat `json:"top_resources,omitempty"`
	ParentError  string                `json:"parent_error,omitempty"`
	ParentLastOK string                `json:"parent_last_ok,omitempty"`
}

// statsData is called by micro on a STATS request, from another goroutine.
func (c *Coordinator) statsData() any {
	c.mu.Lock()
	s := c.statsSnap
	c.mu.Unlock()
	serving, failure := c.serving()
	out := Stats{
		Node: c.opts.Node, ServerID: c.opts.ServerID, Term: c.Term(),
		Serving: serving,
		Rounds:  s.rounds, Requests: s.requests,
		LastRoundMS: float64(s.lastRound) / 1e6, MaxRoundMS: float64(s.maxRound) / 1e6,
		HorizonErrors: s.ledger.RecordErrors, RecordWrites: s.ledger.RecordWrites, RecordWaits: s.ledger.Waits,
		CutLeases: s.ledger.CutLeases, ForeignRecords: s.foreignRecords, ForgedRecords: s.ledger.ForgedRecords, PriorityCapped: s.ledger.PriorityCapped, TenantCapped: s.ledger.TenantCapped, ChildCapped: s.ledger.ChildCapped, OverClaims: s.ledger.OverClaims,
		Unheard: s.ledger.Unheard, Forgotten: s.ledger.Forgotten,
		Silenced: c.gate.Silenced.Load(), Resources: s.ledger.Resources, Clients: s.ledger.Clients,
		RoundErrors: s.errors, Shadow: c.opts.Shadow,
		Partition: c.opts.Partition, Partitions: c.partitionsMeta(),
	}
	if failure != nil {
		out.Failure = failure.Error()
	}
	if t := c.live.Load(); t != nil {
		out.Intake = t.Intake()
	}
	out.Intake.Expired += s.expired
	out.Parent, out.ParentError, out.TopResources = c.opts.Parent, s.parentErr, s.top
	if !s.parentOK.IsZero() {
		out.ParentLastOK = s.parentOK.UTC().Format(time.RFC3339Nano)
	}
	if st, ok := c.opts.Templates.(StatusSource); ok {
		out.Config = st.Status()
	}
	return out
}
