package status

import "time"

// ResourceView describes one resource for operators (the dashboard).
type ResourceView struct {
	ID string `json:"id"`
	// Template names the template the resource was matched to, and
	// Algorithm its algorithm.
	Template  string `json:"template"`
	Algorithm string `json:"algorithm"`
	// Capacity is what the node divides now: the template's, or on a
	// child node its lease from the parent.
	Capacity float64 `json:"capacity"`
	// Granted sums the leases the claimants hold now (lapsed ones
	// excluded); Outstanding bounds what they may hold (earlier larger
	// leases, safe capacities, a predecessor's leases while learning).
	Granted     float64 `json:"granted"`
	Outstanding float64 `json:"outstanding"`
	// Wants sums what the claimants ask for, granted or not, but for
	// those that have neither a live lease nor asked within a lease length.
	Wants float64 `json:"wants"`
	// Claimants counts client records (a child node counts once per
	// priority band), lapsed ones included.
	Claimants int `json:"claimants"`
	// Learning is set while the resource learns what a predecessor
	// leased (until LearningUntil).
	Learning      bool      `json:"learning"`
	LearningUntil time.Time `json:"learning_until,omitzero"`
	// Shadow is set when the resource's leases are shadow: agents admit
	// their wants and only count what the grant would refuse.
	Shadow bool `json:"shadow"`
	// Ceiling is the bound on what is outstanding published in the lease
	// record for a successor, until CeilingExpiry; nil when the record
	// bounds nothing (a per-client algorithm, or no room in the record).
	Ceiling       *float64  `json:"ceiling,omitempty"`
	CeilingExpiry time.Time `json:"ceiling_expiry,omitzero"`
	// Lease and LeaseExpiry are a child node's lease from its parent;
	// LeaseKnown is false until the parent has answered.
	Lease       float64   `json:"lease,omitempty"`
	LeaseExpiry time.Time `json:"lease_expiry,omitzero"`
	LeaseKnown  bool      `json:"lease_known,omitempty"`
}

// ClaimantView describes one claimant of a resource.
type ClaimantView struct {
	// ID is the client id; for a child node's priority band, the child's
	// node name (Node is then set).
	ID   string `json:"id"`
	Node bool   `json:"node,omitempty"`
	// Has is the lease's capacity, Wants what the claimant asked for,
	// Weight how many clients it stands for (1 but for a child's band).
	Has      float64 `json:"has"`
	Wants    float64 `json:"wants"`
	Priority int32   `json:"priority"`
	Weight   float64 `json:"weight"`
	// Expiry is when the lease ends. A lapsed claimant holds nothing and
	// is kept only to count it for the safe capacity until Expiry.
	Expiry time.Time `json:"expiry"`
	Lapsed bool      `json:"lapsed,omitempty"`
}

// ResourceDetail is a ResourceView with the claimants that hold most.
type ResourceDetail struct {
	ResourceView
	// SafeCapacity is the floor per client (per unit of weight) of the
	// last round; -1 unlimited.
	SafeCapacity float64 `json:"safe_capacity"`
	// Matching counts the claimants matching the search (all of them
	// without one); Top lists at most the asked number of them, largest
	// lease first (then largest wants, then id).
	Matching int            `json:"matching"`
	Top      []ClaimantView `json:"top"`
	// Children are the child nodes among the claimants, each summed over
	// its priority bands, by name (at most MaxSnapshotClaimants).
	Children []ChildView `json:"children,omitempty"`
}

// ChildView is a child node's claim on a resource, over its priority
// bands.
type ChildView struct {
	Node string `json:"node"`
	// Has and Wants sum the bands' leases and wants; Clients sums their
	// weights (the clients the child serves), Bands counts them.
	Has     float64 `json:"has"`
	Wants   float64 `json:"wants"`
	Clients float64 `json:"clients"`
	Bands   int     `json:"bands"`
}

// ResourceGauge is one resource's state for metrics.
type ResourceGauge struct {
	ID string
	// Capacity is what the node divides now: the template's, or on a
	// child node its lease.
	Capacity float64
	// Outstanding bounds what the claimants hold; Wants sums what they ask.
	Outstanding float64
	Wants       float64
	Claimants   int
	Learning    bool
	// Shadow is set when the resource's leases are shadow (its template's
	// shadow mode): agents do not enforce them.
	Shadow bool
}

// ResourceTotals sums the gauges of several resources.
type ResourceTotals struct {
	// Count is how many resources are summed; Learning and Shadow how
	// many of them are in learning mode and in shadow mode.
	Count, Learning, Shadow      int
	Capacity, Outstanding, Wants float64
	Claimants                    int
}

// Add folds g into the totals.
func (t *ResourceTotals) Add(g ResourceGauge) {
	t.Count++
	if g.Learning {
		t.Learning++
	}
	if g.Shadow {
		t.Shadow++
	}
	t.Capacity += g.Capacity
	t.Outstanding += g.Outstanding
	t.Wants += g.Wants
	t.Claimants += g.Claimants
}

// ResourceStat is one resource of a coordinator's STATS data
// (top_resources), for operators. Times are RFC 3339.
type ResourceStat struct {
	ID string `json:"id"`
	// Capacity is what the node divides now: the template's, or on a
	// child its lease from the parent (then Lease and LeaseExpiry are set).
	Capacity    float64 `json:"capacity"`
	Lease       float64 `json:"lease,omitempty"`
	LeaseExpiry string  `json:"lease_expiry,omitempty"`
	// Outstanding bounds what the node's claimants hold.
	Outstanding float64 `json:"outstanding"`
	// Floors sums the floors claimants may fall back to (counted until
	// they end), and OnFloor counts the claimants whose lease ended
	// unrefreshed while their floor lasts (cut off, or gone).
	Floors  float64 `json:"floors,omitempty"`
	OnFloor int     `json:"on_floor,omitempty"`
	// Claimants counts client records (a child node counts once per band).
	Claimants int  `json:"claimants"`
	Learning  bool `json:"learning,omitempty"`
	// Withheld is what the node keeps back, after a takeover, for what
	// its predecessor's leases and floors that no claimant has reported
	// may still hold (included in Outstanding); LearningUntil is when the
	// predecessor's leases have all ended, while Learning.
	Withheld      float64 `json:"withheld,omitempty"`
	LearningUntil string  `json:"learning_until,omitempty"`
	// Regime is, on a child node, what its capacity comes from now: its
	// lease from the parent ("lease"), the floor the parent told once
	// that lease ended unrefreshed ("floor", until FloorUntil), or
	// nothing ("none"). Floor is that floor.
	Regime     string  `json:"regime,omitempty"`
	Floor      float64 `json:"floor,omitempty"`
	FloorUntil string  `json:"floor_until,omitempty"`
	// Shadow is set when the resource's leases are shadow: agents do not
	// enforce them.
	Shadow bool `json:"shadow,omitempty"`
}
