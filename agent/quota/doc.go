// Package quota is allot's per-request quota: limits per key asked for at
// the moment of use (logins per user, calls per tenant), decided by the
// coordinators' quota service rather than by a lease.
//
//	a, err := agent.New(nc)
//	q, err := quota.New(a, quota.WithFallback("logins", 5, 10))
//	defer q.Close()                          // sends the reports still pending
//	res, err := q.Take(ctx, "logins:alice", 1) // waits an OK_WAIT's wait
//	var re *quota.RejectedError                // REJECTED: re.Reason, re.RetryAfter
//	err = q.Report("batch:job42", 480)         // charge after the fact, batched
//
// A Client uses its agent's connection, client id, node and logger. Each
// Take is one binary-protobuf request to
// allot.<node>.quota.take.<namespace>.<name>. When the service does not
// answer, a local fallback bucket per namespace decides (WithFallback), or
// Take fails closed with ErrUnavailable; after repeated failures a circuit
// breaker stops asking for a while (WithCircuit), and Status lists each
// namespace's circuit. Package agent/quotahttp puts Take in front of an
// http.Handler. See docs/quota-client.md.
package quota
