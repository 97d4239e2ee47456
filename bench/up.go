package bench

// The up benchmark: allot up as shipped, its clients speaking JSON.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// UpOptions configure the up benchmark. Zero fields take the defaults of
// DefaultUpOptions.
type UpOptions struct {
	// ClosedLoop is the refreshes' load: Clients requests kept in flight
	// (with Pipeline 1), each slot asking as the next of all the clients
	// holding leases in turn.
	ClosedLoop
	// Leases are the numbers of clients holding leases on the one
	// resource, each measured in a fresh allot up.
	Leases []int `json:"leases"`
	// UpArgs are flags added to allot up's command line, beside the
	// benchmark's own --port 0 and --data-dir; none by default (as
	// shipped).
	UpArgs []string `json:"up_args,omitempty"`
}

// DefaultUpOptions are the options of a full run; short runs fill fewer
// leases and shorten Duration and Warmup.
func DefaultUpOptions(short bool) UpOptions {
	o := UpOptions{
		ClosedLoop: ClosedLoop{Duration: 20 * time.Second, Warmup: 2 * time.Second, Phases: 2, Conns: 4, Clients: 256, Pipeline: 1},
		Leases:     []int{200_000, 1_000_000},
	}
	if short {
		o.Duration, o.Warmup, o.Leases = 8*time.Second, time.Second, []int{50_000}
	}
	return o
}

func (o *UpOptions) fill(short bool) {
	d := DefaultUpOptions(short)
	o.ClosedLoop.fill(d.ClosedLoop)
	if len(o.Leases) == 0 {
		o.Leases = d.Leases
	}
}

// upFillInFlight is the fill's lease requests in flight: below the
// newcomers' share of allot up's default intake bound (three quarters of
// 1,024), so that the fill measures grants rather than 503s and retries.
const upFillInFlight = 512

// upTemplate is the resource's template, stored as a user would with
// `allot config put`: FAIR_SHARE, contended (capacity five per client,
// wants 0.5..19.5), leases long enough to outlast the fill and the
// measurement, so that every client holds one throughout.
func upTemplate(n int) string {
	return fmt.Sprintf(`{"identifier_glob":%q,"capacity":%d,"description":"allot bench up","algorithm":{"kind":"FAIR_SHARE","lease_length":"30m","refresh_interval":"10m"}}`,
		scaleResource, 5*n)
}

// UpPoint is one allot up holding Clients leases.
type UpPoint struct {
	Clients int `json:"clients"`
	// Command is allot up's command line, the data directory elided.
	Command string `json:"command"`
	// Refused, when set, is why the fill did not complete: allot up's
	// refusals by code (with these flags it does not let that many
	// clients in), or the time-out. Nothing else is measured then.
	Refused     string  `json:"refused,omitempty"`
	FillSeconds float64 `json:"fill_seconds"`
	FillRPS     float64 `json:"fill_rps"`
	// RSSPerLease is allot up's resident set's growth over the fill per
	// lease (the Go heap's live part and what the runtime keeps).
	RSSPerLease float64 `json:"rss_bytes_per_lease"`
	// RequestBytes is one refresh request's size; ReplyBytes the median
	// size of real JSON replies to clients spread over all of them (the
	// echo's reply size), between ReplyBytesMin and ReplyBytesMax.
	RequestBytes  int `json:"request_bytes"`
	ReplyBytes    int `json:"reply_bytes"`
	ReplyBytesMin int `json:"reply_bytes_min"`
	ReplyBytesMax int `json:"reply_bytes_max"`
	// Echo and Up are the closed-loop refreshes against each; their
	// CPU is the server side: the echo process plus allot up's (its
	// embedded nats-server routes the echo's messages), and allot up's
	// alone.
	Echo LoadTarget `json:"echo"`
	Up   LoadTarget `json:"up"`
	// Ratio is allot up's refreshes per second over the echo's, P99Ratio
	// its p99 latency over the echo's, CPURatio its CPU per request over
	// the echo's.
	Ratio    float64 `json:"ratio"`
	P99Ratio float64 `json:"p99_ratio"`
	CPURatio float64 `json:"cpu_per_request_ratio"`
	// Stats is allot up's coordinator's micro STATS at the end.
	Stats *coordinator.Stats `json:"coordinator_stats,omitempty"`
}

// UpResult is the outcome of RunUp.
type UpResult struct {
	Machine Machine    `json:"machine"`
	Options UpOptions  `json:"options"`
	Points  []*UpPoint `json:"points"`
	// Template is the resource's template as stored.
	Template         string  `json:"template"`
	TargetRatio      float64 `json:"target_ratio"`
	TargetP99Ratio   float64 `json:"target_p99_ratio"`
	DefaultMaxClient int     `json:"default_max_clients"`
}

// RunUp measures a plain allot up, as shipped, holding n leases on one
// FAIR_SHARE resource for each n of o.Leases, its clients speaking JSON
// without headers as `nats req` does: closed-loop refreshes of all n
// clients in turn, against a bare echo on the same embedded nats-server
// that answers with a reply of a real refresh reply's size, alternating.
func RunUp(ctx context.Context, env *Env, o UpOptions) (*UpResult, error) {
	o.fill(env.Short)
	if env.Allot == nil || env.Child == nil {
		return nil, errors.New("bench: the up benchmark runs allot up and the echo in separate processes (not --in-process)")
	}
	res := &UpResult{Machine: DescribeMachine(), Options: o, TargetRatio: TargetRefreshRatio,
		TargetP99Ratio: TargetRefreshP99Ratio, DefaultMaxClient: coordinator.DefaultMaxClients}
	var failed []string
	for _, n := range o.Leases {
		p, err := upPoint(ctx, env, o, n)
		if err != nil {
			return res, err
		}
		res.Points = append(res.Points, p)
		if p.Refused != "" {
			env.progressf("up: %d clients: %s", n, p.Refused)
			failed = append(failed, fmt.Sprintf("%d clients: %s", n, p.Refused))
			continue
		}
		env.progressf("up: %d clients: allot up %.0f req/s, p99 %.0f µs, CPU %.2f µs/req; echo %.0f req/s, p99 %.0f µs, CPU %.2f µs/req: %.2f×, p99 %.2f×, CPU %.2f×",
			n, p.Up.RPS, p.Up.P99us, p.Up.CPUPerReqUs, p.Echo.RPS, p.Echo.P99us, p.Echo.CPUPerReqUs, p.Ratio, p.P99Ratio, p.CPURatio)
	}
	res.Template = upTemplate(o.Leases[len(o.Leases)-1])
	if err := env.writeJSON("up.json", res); err != nil {
		return res, err
	}
	if err := env.writeFile("up.md", []byte(res.Markdown())); err != nil {
		return res, err
	}
	if len(failed) > 0 {
		return res, fmt.Errorf("bench: allot up did not take every client: %s", strings.Join(failed, "; "))
	}
	return res, nil
}

// upPoint starts allot up, fills n leases and measures the refreshes.
func upPoint(ctx context.Context, env *Env, o UpOptions, n int) (*UpPoint, error) {
	up, dir, m, err := runAllotUp(ctx, env, "allot-bench-up-", o.UpArgs, upAnnounced)
	if err != nil {
		return nil, err
	}
	defer func() {
		up.stop()
		_ = os.RemoveAll(dir)
	}()
	url := m[1]
	p := &UpPoint{Clients: n, Command: strings.Join(append([]string{"allot up --port 0 --data-dir DIR"}, o.UpArgs...), " ")}
	if err := storeConfig(ctx, url, map[string]string{"templates.bench-up": upTemplate(n)}); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, nats.Name("allot bench up"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer nc.Close()
	subject := coordinator.Subject(coordinator.DefaultNode, "capacity.get")
	if err := awaitTemplate(ctx, nc, subject); err != nil {
		return nil, err
	}

	before, err := readProc(up.pid())
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := fillLeases(ctx, env, url, subject, n, upFillInFlight, wire.JSON, 20*time.Second); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		p.Refused = err.Error()
		return p, nil
	}
	p.FillSeconds = time.Since(start).Seconds()
	p.FillRPS = float64(n) / p.FillSeconds
	after, err := readProc(up.pid())
	if err != nil {
		return nil, err
	}
	p.RSSPerLease = float64(after.rssKiB-before.rssKiB) * 1024 / float64(n)
	env.progressf("up: %d leases filled in %.1fs (%.0f req/s); allot up's RSS grew %.0f bytes per lease", n, p.FillSeconds, p.FillRPS, p.RSSPerLease)

	sizes, err := replySizes(nc, subject, n, 64)
	if err != nil {
		return nil, err
	}
	p.ReplyBytes, p.ReplyBytesMin, p.ReplyBytesMax = sizes[len(sizes)/2], sizes[0], sizes[len(sizes)-1]
	p.RequestBytes = len(appendScaleRequest(nil, wire.JSON, n-1, n))

	echo, err := env.startHelper(ctx, RoleEcho, url, []string{"--subject", echoSubject, "--reply-size", strconv.Itoa(p.ReplyBytes)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = echo.stop() }()
	// The echo's server side is its process and allot up's embedded
	// nats-server, which routes its messages.
	echoSide := &helper{role: RoleEcho, pid: echo.pid + "," + up.pid()}
	upSide := &helper{role: "allot up", pid: up.pid()}
	lc := o.ClosedLoop
	lc.Clients = min(lc.Clients, n)
	g, err := newGenerator(url, lc.Conns, lc.Clients, lc.Pipeline, func(client int) ([]byte, []string, error) {
		return appendScaleRequest(nil, wire.JSON, client, n), []string{echoSubject, subject}, nil
	})
	if err != nil {
		return nil, err
	}
	defer g.close()
	g.setContentType("")
	g.cycle(n, func(dst []byte, client int) []byte { return appendScaleRequest(dst, wire.JSON, client, n) })
	p.Echo.Name = fmt.Sprintf("bare NATS echo, %d-byte JSON replies", p.ReplyBytes)
	p.Up.Name = fmt.Sprintf("allot up holding %d leases", n)
	if _, err := g.alternate(ctx, env, fmt.Sprintf("up %d", n), lc, []*LoadTarget{&p.Echo, &p.Up}, []*helper{echoSide, upSide}); err != nil {
		return nil, err
	}
	p.Ratio = safeDiv(p.Up.RPS, p.Echo.RPS)
	p.P99Ratio = safeDiv(p.Up.P99us, p.Echo.P99us)
	p.CPURatio = safeDiv(p.Up.CPUPerReqUs, p.Echo.CPUPerReqUs)
	if st, err := fetchStats(nc); err == nil {
		p.Stats = st
	}
	return p, nil
}

// awaitTemplate waits until the coordinator on subject applies the
// benchmark's template (the lease it grants lasts upTemplate's 30
// minutes, not the seeded catch-all's minute), asking as client 0.
func awaitTemplate(ctx context.Context, nc *nats.Conn, subject string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, _, err := askJSON(nc, subject, 0, 1)
		if err == nil && len(resp.GetResponse()) == 1 {
			if exp := resp.GetResponse()[0].GetGets().GetExpiryTime(); exp != nil && time.Until(exp.AsTime()) > 10*time.Minute {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: allot up did not apply the benchmark's template within a minute (last: %v)", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// askJSON sends client i of n's refresh in JSON without a header, as
// `nats req` does, and returns the decoded reply and its size.
func askJSON(nc *nats.Conn, subject string, i, n int) (*allotpb.GetCapacityResponse, int, error) {
	m, err := nc.RequestMsg(&nats.Msg{Subject: subject, Data: appendScaleRequest(nil, wire.JSON, i, n)}, 10*time.Second)
	if err != nil {
		return nil, 0, fmt.Errorf("bench: refresh: %w", err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, 0, fmt.Errorf("bench: refresh: error %s: %s", code, m.Header.Get("Nats-Service-Error"))
	}
	if ct := m.Header.Get(wire.HeaderContentType); ct != wire.ContentJSON {
		return nil, 0, fmt.Errorf("bench: refresh: reply of Content-Type %q, want %s", ct, wire.ContentJSON)
	}
	var resp allotpb.GetCapacityResponse
	if err := wire.Unmarshal(wire.JSON, m.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("bench: refresh reply: %w", err)
	}
	return &resp, len(m.Data), nil
}

// replySizes returns the sorted sizes of the JSON replies to k of the n
// clients, spread over all of them.
func replySizes(nc *nats.Conn, subject string, n, k int) ([]int, error) {
	k = min(k, n)
	sizes := make([]int, 0, k)
	for j := range k {
		_, size, err := askJSON(nc, subject, j*(n/k), n)
		if err != nil {
			return nil, err
		}
		sizes = append(sizes, size)
	}
	slices.Sort(sizes)
	return sizes, nil
}

// Markdown renders the result as tables.
func (r *UpResult) Markdown() string {
	var b strings.Builder
	b.WriteString("### allot up (as shipped) with its clients speaking JSON\n\n")
	fmt.Fprintf(&b, "%s.\n\n", r.Machine.Markdown())
	o := r.Options
	fmt.Fprintf(&b, "For each size n, a fresh `allot up` in its own process, with its defaults (embedded nats-server on a free port, a new data directory) and no other flag%s; "+
		"the resource's template (capacity five per client) stored as a user would (`allot config put`; at the largest size `%s`). n clients fill it, one JSON GetCapacity each, %d in flight, without headers as `nats req` sends them (`%s`). "+
		"Then closed-loop refreshes: %d requests in flight on %d connections, each slot asking as the next of all n clients in turn, against allot up and against a bare echo (its own process, on allot up's nats-server) answering with a reply of a real JSON refresh reply's size; "+
		"%v measured per target in %d alternating phases after %v warm-up each. CPU is the server side: allot up's process (coordinator and embedded nats-server) against the echo's process plus allot up's (which routes the echo's messages).\n\n",
		upArgsNote(o.UpArgs), r.Template, upFillInFlight, strings.TrimSpace(string(appendScaleRequest(nil, wire.JSON, 0, 1))),
		o.Clients*o.Pipeline, o.Conns, o.Duration, o.Phases, o.Warmup)
	var rows [][]string
	for _, p := range r.Points {
		if p.Refused != "" {
			rows = append(rows, []string{strconv.Itoa(p.Clients), "refused: " + p.Refused, "", "", "", "", "", ""})
			continue
		}
		rows = append(rows, []string{strconv.Itoa(p.Clients), f1(p.FillSeconds), f0(p.FillRPS), f0(p.RSSPerLease), strconv.Itoa(p.RequestBytes),
			fmt.Sprintf("%d (%d–%d)", p.ReplyBytes, p.ReplyBytesMin, p.ReplyBytesMax), f2(p.Ratio), f2(p.P99Ratio) + ", CPU " + f2(p.CPURatio)})
	}
	b.WriteString(table([]string{"clients", "fill s", "fill req/s", "RSS growth B/lease", "request B", "reply B (range)", "throughput ÷ echo", "p99 ÷ echo, CPU/req ÷ echo"}, rows))
	for _, p := range r.Points {
		if p.Refused != "" {
			fmt.Fprintf(&b, "\n**%d clients: allot up (%s) did not take them all: %s.**\n", p.Clients, p.Command, p.Refused)
			continue
		}
		fmt.Fprintf(&b, "\n%d clients holding leases:\n\n", p.Clients)
		b.WriteString(targetTable(p.Echo, p.Up))
		fmt.Fprintf(&b, "\n**allot up / bare echo at %d clients: throughput %.2f× (target ≥ %.1f×: %s), p99 latency %.2f× (target ≤ %.0f×: %s), CPU per request %.2f×.**\n",
			p.Clients, p.Ratio, r.TargetRatio, verdict(p.Ratio >= r.TargetRatio), p.P99Ratio, r.TargetP99Ratio, verdict(p.P99Ratio <= r.TargetP99Ratio), p.CPURatio)
		if st := p.Stats; st != nil {
			fmt.Fprintf(&b, "\nallot up's coordinator at the end (micro STATS): %d client records, %d requests in %d rounds (%.0f a round, fill and warm-ups included), longest round %.1f ms, intake refusals %d (503) and %d (429, a tenant's rate).\n",
				st.Clients, st.Requests, st.Rounds, safeDiv(float64(st.Requests), float64(st.Rounds)), st.MaxRoundMS, st.Intake.Refused, st.Intake.Limited)
		}
	}
	return b.String()
}

// upArgsNote says which flags were added to allot up's command line.
func upArgsNote(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return " but `" + strings.Join(args, " ") + "`"
}
