// Package envoyrl is the configuration and the decision core of Envoy's
// global rate limit API (envoy.service.ratelimit.v3.RateLimitService,
// ShouldRateLimit), with the meaning envoyproxy/ratelimit, the reference
// server, gives them.
//
// Parse reads the reference's YAML configuration unchanged, one domain per
// YAML document, strictly. NewConfig compiles domains into the descriptor
// tree the reference matches requests against. Limiter.ShouldRateLimit
// answers a request at a given instant from counters kept in a Store: fixed
// windows aligned to the unit from the Unix epoch, as the reference keys
// them. The package does no I/O and reads no clock; the caller passes the
// time and owns the store, so the counters can live wherever the server
// keeps them.
//
// Where allot deliberately departs from the reference, ParseOptions.Reference
// and Options.Reference select the reference's behaviour; docs/envoy.md lists
// the differences.
package envoyrl
