// Package domain is allot's domain limits: limits per domain (a tenant, a
// user) in the style of Charon — rate limits with burst tiers, and copies
// held at once — asked of the domain service at the moment of use, one
// JSON request each.
//
//	a, err := agent.New(nc)
//	d, err := domain.New(a)
//	defer d.Close() // gives back every hold still open
//	g, err := d.Request(ctx, "api:search", "acme", 1, domain.WithMaxWait(5*time.Second))
//	h, err := d.Reserve(ctx, "jobs:sandbox", "acme", 10, domain.WithMinCopies(5))
//	defer h.Close()                             // h.Release(ctx, n) gives part back
//	tid, err := h.Transfer(ctx, 5, time.Minute) // another process: d.Seize(ctx, tid)
//
// A Client uses its agent's connection, client id, node and logger. A
// rejection is a *RejectedError (wrapping ErrRejected), retried with
// jittered exponential backoff within WithMaxWait. Holds are refreshed in
// the background, one message per resource, so a process that dies loses
// them within the service's hold ttl and a new leader learns them after a
// failover. When no domain service answers, Request and Reserve fail open
// with the min copies (Degraded) as far as the namespace's fail mode
// allows: always (open), never (closed), or for holds only within the
// client's share of each limit, which the service's replies tell it
// (share, the default); SetKillSwitch turns rejections into grants marked
// Shadow. AcquireAll takes several resources
// pseudo-atomically. Status counts it all. See docs/domains-client.md.
package domain
