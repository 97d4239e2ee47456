// Package agent is the client library of allot, a distributed client-side
// rate limiter: services embed an Agent to stay within their fair share of
// a global limit that a coordinator divides among all clients over NATS.
//
// The Agent holds leases (Rate, Gauge). Allot's two per-request products
// have packages of their own, made from an Agent and sharing its
// connection, client id, node and logger: agent/quota (Take a token of a
// bucket, quota.New(a)) and agent/domain (Charon-style domain limits,
// domain.New(a)). Each has its own options, errors and Close.
//
// # Usage
//
// One import and three lines put a handler under a global rate limit:
//
//	a, err := agent.New(nc)                 // nc is a *nats.Conn
//	lim, err := a.Rate("mysql/main")        // this client's share, per second
//	if err := lim.Wait(ctx); err != nil { … } // before each query
//
// and defer a.Close() to give the capacity back when the service stops.
// Every Allow and Wait is decided locally, in a mutex-protected token bucket
// whose rate follows the granted capacity; no protected request touches the
// network. Gauges limit how many units are in flight instead:
//
//	g, err := a.Gauge("mysql/connections")
//	err = g.Do(ctx, 1, func(ctx context.Context) error { … })
//
// # Leases and refreshes
//
// The agent runs one background goroutine. It asks the coordinator for
// capacity on all its resources in a single binary-protobuf GetCapacity
// request (subject allot.<node>.capacity.get) every refresh interval — the
// shortest interval among the leases, with jitter — reporting for each
// resource the lease it holds ("has") and the capacity it wants. Beyond
// 1000 resources, the most a coordinator accepts in one request, the
// refresh is split into several requests sent together. A new resource or
// a large change in wants triggers an earlier request, at most one per
// WithMinRefreshGap. Responses whose term is lower than the highest seen
// are ignored, unless three refreshes in a row are answered only by lower
// terms: then the higher term is gone or was never real (a forged reply),
// and the agent follows the coordinator that answers. A lease is never
// taken to last more than 24 hours, whatever a reply claims.
//
// Agent.Close releases all leases with ReleaseCapacity; a limiter's or
// gauge's own Close releases that resource alone, so limiters can come
// and go (one per tenant, say) without holding capacity they no longer
// use. Every request goes out from the background goroutine, one exchange
// after the other: a release is sent only once the GetCapacity before it
// has been answered or has timed out, so the coordinator never sees a
// client's release ahead of the request that would grant the lease again.
//
// # Wants
//
// By default the wants are estimated from observed demand: for rates the
// tokens requested per second, counting refused Allow calls and blocked
// Wait calls; for gauges the peak of units held plus units waited for. The
// estimate follows growth at once and decays with a 20s time constant.
// When callers were held back during a sample, the estimate is at least
// 1.25 times the capacity in force, so closed loops (whose demand cannot
// exceed what they are given) still discover their share. SetWants or
// WithWants fix the wants instead; values that are NaN, infinite or
// negative are rejected with an error.
//
// # Failure behaviour
//
// When the coordinator does not answer (no responders, a timeout, an error
// reply), the agent keeps each lease until it expires and retries with
// capped exponential backoff and jitter. Once a lease has expired the
// resource's capacity follows the agent's Mode:
//
//   - Safe (default): the safe capacity (the floor) the coordinator last
//     reported (-1 unlimited, 0 blocked), until the end it reported with
//     it (Status.SafeUntil), then 0 (SourceNone): the coordinator counts
//     the floor as held until then, so a client cut off for longer uses
//     nothing that anyone counts.
//   - Optimistic: the wants.
//   - Pessimistic: 0.
//
// Before the first lease the same rules apply, with the safe capacity
// taken from WithInitialCapacity (default 0: the resource is blocked for
// the round trip it takes to get its first lease, and a Wait simply waits
// for it). In Optimistic mode a resource with estimated wants and no demand
// observed yet is unlimited. When a coordinator answers again, leases are
// installed on the next refresh.
//
// # Shadow mode
//
// A coordinator can mark a resource's leases shadow (its template says
// "shadow": true, or it runs with --shadow). The agent then enforces the
// wants instead (no limit with automatic wants) and measures every
// admission against the capacity it would have enforced: Status reports
// Shadow, ShadowCapacity, ShadowAdmitted and WouldRefuse, the events the
// grant would have refused. This is how a new limit is watched before it
// refuses anything.
//
// Status, Capacity and Expiry report where each resource stands (capacity
// in force and its Source, lease expiry, mode, last error); WithOnChange
// registers a callback for every change of capacity. Usage adds what
// each limiter admitted and refused and the time spent without a lease;
// package agent/agentmetrics exposes it all to Prometheus.
//
// # Connecting to a secure deployment
//
// The agent uses the *nats.Conn the service gives it, so credentials and
// TLS are the connection's options. Against the shipped secure
// configuration (deploy/nats/secure, docs/security.md) a tenant's service
// connects with its nkey seed (or nats.UserCredentials for a JWT
// credentials file, nats.UserInfo for a password), the CA that signed
// the server's certificate (and a client certificate if the server
// verifies clients), and its private reply prefix, the only one its user
// may subscribe to; agent.ErrorHandler logs any refused permission with
// its subject, which NATS reports in no other way:
//
//	nkey, err := nats.NkeyOptionFromSeed("/etc/allot/nkeys/tenant_a.nk")
//	nc, err := nats.Connect("tls://nats.example:4222", nkey,
//		nats.RootCAs("/etc/allot/tls/ca.pem"),
//		nats.ClientCert("/etc/allot/tls/client-cert.pem", "/etc/allot/tls/client-key.pem"),
//		nats.CustomInboxPrefix("_INBOX_tenant_a"),
//		nats.ErrorHandler(agent.ErrorHandler(nil)))
//	a, err := agent.New(nc)
//
// Nothing else changes: the agent publishes the ordinary subjects in the
// tenant's account, and the account's import delivers them to the
// coordinators as the tenant's.
//
// # Accuracy
//
// A RateLimiter is shaped like golang.org/x/time/rate's Limiter, but
// AllowN and ReserveN take no time argument: it reads the clock inside its
// lock, so that concurrent callers cannot over-admit. (A limiter given the
// time by its caller can be handed times out of order, one caller's read
// before another's, and then admits more than its rate.) A Wait that holds
// a reservation keeps its place and is rescheduled when the capacity
// changes. With a granted rate R it admits R per second plus at most one
// burst, whatever the number of callers; the tests check this with an
// injected Clock.
package agent
