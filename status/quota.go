package status

import "time"

// Quota is the "data" of the quota service's micro STATS: one partition's
// serving leader.
type Quota struct {
	PartitionLeader
	// BucketsStartFull is true on the first leader of a fresh deployment;
	// after a failover buckets start drained at Since (see
	// docs/quota-deploy.md).
	BucketsStartFull bool      `json:"buckets_start_full"`
	Since            time.Time `json:"since,omitzero"`
	// Buckets alive in memory.
	Buckets int `json:"buckets"`
	// Takes and Reports count decisions made and reports applied here.
	Takes   uint64 `json:"takes"`
	Reports uint64 `json:"reports"`
	// Forwarded counts requests on the plain subjects passed on to the
	// partition that owns their namespace.
	Forwarded uint64 `json:"forwarded"`
	// Silenced counts replies withheld because the server may no longer
	// answer.
	Silenced uint64 `json:"silenced"`
	// Events are quotaservice's events counted per namespace.
	Events map[string]QuotaEvents `json:"events,omitempty"`
	// Shadow is set when the server runs in shadow mode (quotaserver.Options.Shadow).
	// ShadowWouldRefuse counts takes answered OK in shadow mode that their
	// bucket answered REJECTED or OK_WAIT, in all and per configured
	// namespace (the server's or the namespace's shadow mode).
	Shadow                bool              `json:"shadow,omitempty"`
	ShadowWouldRefuse     uint64            `json:"shadow_would_refuse"`
	ShadowWouldRefuseByNS map[string]uint64 `json:"shadow_would_refuse_by_namespace,omitempty"`
}

// QuotaEvents counts quotaservice's events for one namespace. Counters only
// grow; they are per namespace, never per key, to keep cardinality
// bounded.
type QuotaEvents struct {
	// Served counts takes answered OK (peeks are not counted).
	Served uint64 `json:"served"`
	// ServedWait counts requests answered OK_WAIT.
	ServedWait uint64 `json:"served_wait"`
	// Tokens is the tokens admitted by Served and ServedWait.
	Tokens uint64 `json:"tokens"`
	// Reported is the tokens charged by Report.
	Reported uint64 `json:"reported"`
	// Timeout counts REJECTED "timeout".
	Timeout uint64 `json:"timeout"`
	// NoWait counts REJECTED "no_wait".
	NoWait uint64 `json:"no_wait"`
	// TooManyTokens counts REJECTED "too_many_tokens".
	TooManyTokens uint64 `json:"too_many_tokens"`
	// BucketMiss counts REJECTED "no_bucket".
	BucketMiss uint64 `json:"bucket_miss"`
	// TooManyBuckets counts REJECTED "too_many_buckets".
	TooManyBuckets uint64 `json:"too_many_buckets"`
	// DynamicCreated counts dynamic buckets created.
	DynamicCreated uint64 `json:"dynamic_created"`
	// Removed counts buckets dropped by Sweep or SetConfig.
	Removed uint64 `json:"removed"`
	// Banned counts REJECTED "banned".
	Banned uint64 `json:"banned"`
	// Reserved counts REJECTED "reserved".
	Reserved uint64 `json:"reserved"`
	// SoftLimit counts decisions carrying the "soft_limit" warning.
	SoftLimit uint64 `json:"soft_limit"`
	// BadRequest counts REJECTED "bad_request" (negative tokens, or a
	// malformed name asking for a dynamic bucket).
	BadRequest uint64 `json:"bad_request"`
}
