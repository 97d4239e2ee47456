package status

import "time"

// DomainCounts are the server's event counters.
type DomainCounts struct {
	Requests        uint64 `json:"requests"`
	HitsGranted     uint64 `json:"hits_granted"`
	Rejected        uint64 `json:"requests_rejected"`
	Reserves        uint64 `json:"reserves"`
	CopiesGranted   uint64 `json:"copies_granted"`
	ReservesRefused uint64 `json:"reserves_refused"`
	// LearningRefusals counts reserves answered "learning".
	LearningRefusals uint64 `json:"learning_refusals"`
	Releases         uint64 `json:"releases"`
	Refreshes        uint64 `json:"refreshes"`
	// Restored counts holds adopted from refreshes while learning; Lost
	// the holds refreshes listed that the server no longer had.
	Restored uint64 `json:"restored"`
	// Unsealed counts holds a learning leader refused to adopt because
	// their seal did not vouch for them (a client claiming copies it was
	// not granted, or a seal older than the seal TTL); they count in Lost.
	Unsealed  uint64 `json:"unsealed"`
	Lost      uint64 `json:"lost"`
	Expired   uint64 `json:"holds_expired"`
	Transfers uint64 `json:"transfers"`
	Seized    uint64 `json:"seized"`
	// TransfersExpired counts staged transfers released after their ttl.
	TransfersExpired uint64 `json:"transfers_expired"`
	Errors           uint64 `json:"errors"`
}

// Domain is the "data" of the domain service's micro STATS.
type Domain struct {
	PartitionLeader
	LearnUntil time.Time `json:"learning_until,omitzero"`
	Resources  int       `json:"resources"`
	Holds      int       `json:"holds"`
	// CopiesHeld sums every live hold's copies, staged transfers included.
	CopiesHeld int64 `json:"copies_held"`
	// Transfers counts staged transfers, not yet seized.
	Transfers int    `json:"transfers"`
	Silenced  uint64 `json:"silenced"`
	DomainCounts
	// Learning is true while the server learns the live holds from
	// refreshes (until LearnUntil) and grants no copies.
	Learning bool `json:"learning"`
}
