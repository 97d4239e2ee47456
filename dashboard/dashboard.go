// Package dashboard serves allot's live web dashboard: per resource,
// capacity against what is handed out and wanted as a chart over the last
// minutes, the largest claimants with their leases counting down, learning
// mode and the lease record's ceiling, the node's leader, term and
// followers, its parent link, the configuration version and the last
// rejected put, quota namespaces with their event counts, and the domain
// limits' partitions with their holds and counters.
//
// The page is a single embedded HTML file with plain JavaScript and SVG
// (no CDN, works offline). It follows a server-sent event stream
// (GET <prefix>/events) fed from the coordinator's own state: each
// event is a Snapshot taken on the coordinator's round loop. Claimants are
// listed server side, top N and filtered by a search, so a resource with
// 10,000 claimants costs the browser no more than one with ten.
//
// The handler answers only requests whose Host is an IP address,
// localhost or a name it is told (Options.AllowedHosts), against DNS
// rebinding, and with Options.Token only requests that carry the token.
//
// Mount Handler on an http.ServeMux and run Run alongside it; see
// docs/dashboard.md.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/status"
)

//go:embed assets
var assets embed.FS

// Defaults for Options.
const (
	DefaultInterval = time.Second
	DefaultHistory  = 5 * time.Minute
	// DefaultTop is how many claimants a page lists unless it asks for
	// another number (?top=, at most status.MaxSnapshotClaimants).
	DefaultTop = 50
	// QuotaService is the NATS micro service whose STATS carry quota
	// namespaces' event counts (allot's quota servers).
	QuotaService = status.QuotaService
)

// Source is where the dashboard takes its state from: a
// *coordinator.Coordinator, a *coordinator.Replica, or several replicas of
// one process (see Replicas).
type Source interface {
	Snapshot(ctx context.Context, resource string, topN int, search string) (*status.Snapshot, error)
}

// Replicas is a Source over the replicas a process runs now (replicas may
// come and go; list returns them, for instance *coordinator.Replica's): it
// answers with the snapshot of the one that serves, else with the first
// one's.
func Replicas[S Source](list func() []S) Source { return replicas[S](list) }

type replicas[S Source] func() []S

// Snapshot implements Source.
func (rs replicas[S]) Snapshot(ctx context.Context, resource string, topN int, search string) (*status.Snapshot, error) {
	var first *status.Snapshot
	for _, r := range rs() {
		s, err := r.Snapshot(ctx, resource, topN, search)
		if err != nil {
			return nil, err
		}
		if s.Serving {
			return s, nil
		}
		if first == nil {
			first = s
		}
	}
	if first == nil {
		return nil, errors.New("dashboard: no coordinator replica runs yet")
	}
	return first, nil
}

// Options configure a Dashboard.
type Options struct {
	// Source supplies the coordinator's state; required.
	Source Source
	// Conn, if set, is used to list the node's replicas (leader and
	// followers, from their micro STATS), quota namespaces (from the
	// STATS of QuotaService) and domain partitions (from the STATS of
	// status.DomainService) every few seconds. Without it the page
	// shows only the local replica, no quota namespaces and no domain
	// partitions.
	Conn *nats.Conn
	// Interval is how often the page is updated and the chart sampled.
	// Default 1s.
	Interval time.Duration
	// History is how far back the chart goes. Default 5m.
	History time.Duration
	// Logger receives the dashboard's logs. Default slog.Default().
	Logger *slog.Logger
	// AllowedHosts are the host names (without port) requests may name
	// in their Host header besides IP addresses, localhost and names
	// under .localhost: the names the dashboard is reached by. A request
	// naming another host is refused (403), so that a web page whose name
	// an attacker made resolve to this host (DNS rebinding) cannot read
	// the dashboard from a browser.
	AllowedHosts []string
	// Token, if set, is required on every request: in the header
	// "Authorization: Bearer TOKEN", or in the cookie TokenCookie that a
	// visit with ?token=TOKEN sets (then redirected to the address
	// without it). At least MinTokenLength characters.
	Token string
}

// Dashboard serves the page and its event stream. Create it with New.
type Dashboard struct {
	opts   Options
	log    *slog.Logger
	static http.Handler
	// ended is closed when Run returns: open streams end with it, since
	// http.Server.Shutdown waits for handlers and a stream never idles.
	ended   chan struct{}
	endOnce sync.Once

	mu       sync.Mutex
	hist     map[string]*series // per resource
	replicas []Replica
	quota    []QuotaNamespace
	domain   []DomainPartition
}

// Point is one sample of a resource for the chart.
type Point struct {
	// T is the sample's time in Unix milliseconds.
	T           int64   `json:"t"`
	Capacity    float64 `json:"capacity"`
	Granted     float64 `json:"granted"`
	Wants       float64 `json:"wants"`
	Outstanding float64 `json:"outstanding"`
}

// Replica is one replica of the node as its micro STATS report it.
type Replica struct {
	ServerID string `json:"server_id"`
	Role     string `json:"role,omitempty"`
	Term     uint64 `json:"term,omitempty"`
	Serving  bool   `json:"serving"`
}

// QuotaNamespace is one quota namespace of one partition with its event
// counters (served, rejected by reason, and so on) as its quota server
// reports them.
type QuotaNamespace struct {
	Name      string            `json:"name"`
	Partition int               `json:"partition"`
	Events    map[string]uint64 `json:"events"`
}

// Event is the JSON of one server-sent event ("state") of the stream.
type Event struct {
	Snapshot *status.Snapshot `json:"snapshot"`
	// Points are the chart's samples of the selected resource: its whole
	// history in the first event (Reset set), then only newer ones.
	Points []Point `json:"points"`
	Reset  bool    `json:"reset,omitempty"`
	// Replicas are the node's replicas last heard of; nil without
	// Options.Conn.
	Replicas []Replica `json:"replicas"`
	// Quota lists quota namespaces; empty when no quota server answers.
	Quota []QuotaNamespace `json:"quota"`
	// Domain lists the node's serving domain partitions; empty when no
	// domain partition's leader answers.
	Domain []DomainPartition `json:"domain"`
	// Top is the number of claimants asked for; HistoryMS how far back
	// the chart goes (Options.History).
	Top       int   `json:"top"`
	HistoryMS int64 `json:"history_ms"`
	// Error is set when the coordinator could not be asked this time.
	Error string `json:"error,omitempty"`
}

// series is a ring of a resource's samples.
type series struct {
	pts  []Point
	next int
	full bool
	last int64 // unix ms of the newest
}

func (s *series) add(p Point) {
	s.pts[s.next] = p
	s.next = (s.next + 1) % len(s.pts)
	s.full = s.full || s.next == 0
	s.last = p.T
}

// since returns the samples newer than t (unix ms), oldest first.
func (s *series) since(t int64) []Point {
	var out []Point
	n := s.next
	if s.full {
		n = len(s.pts)
	}
	for k := range n {
		i := k
		if s.full {
			i = (s.next + k) % len(s.pts)
		}
		if s.pts[i].T > t {
			out = append(out, s.pts[i])
		}
	}
	return out
}

// New validates opts and returns a Dashboard.
func New(opts Options) (*Dashboard, error) {
	if opts.Source == nil {
		return nil, errors.New("dashboard: no source")
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.History == 0 {
		opts.History = DefaultHistory
	}
	if opts.Interval < 10*time.Millisecond || opts.Interval > time.Minute {
		return nil, fmt.Errorf("dashboard: interval %v: want 10ms to 1m", opts.Interval)
	}
	if opts.History < opts.Interval || opts.History/opts.Interval > 100_000 {
		return nil, fmt.Errorf("dashboard: history %v: want at least the interval %v and at most 100,000 samples", opts.History, opts.Interval)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Token != "" && len(opts.Token) < MinTokenLength {
		return nil, fmt.Errorf("dashboard: the token has %d characters: want at least %d (for example 32 random hex digits: openssl rand -hex 16)", len(opts.Token), MinTokenLength)
	}
	hosts, err := normalHosts(opts.AllowedHosts)
	if err != nil {
		return nil, err
	}
	opts.AllowedHosts = hosts
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("dashboard: assets: %w", err)
	}
	return &Dashboard{opts: opts, log: opts.Logger, static: http.FileServerFS(sub), hist: map[string]*series{}, ended: make(chan struct{})}, nil
}

// Run samples the coordinator's resources for the chart every interval,
// and the node's replicas, quota namespaces and domain partitions every
// few seconds, until ctx ends; then it ends the open event streams. The
// handler serves without it, but its charts then stay empty.
func (d *Dashboard) Run(ctx context.Context) error {
	defer d.endOnce.Do(func() { close(d.ended) })
	var wg sync.WaitGroup
	defer wg.Wait()
	if d.opts.Conn != nil {
		// Apart from sampling: each round waits for replies a while.
		wg.Go(func() { every(ctx, peersEvery, d.peers) })
	}
	every(ctx, d.opts.Interval, d.sample)
	return nil
}

// every calls f at once and then every period until ctx ends.
func every(ctx context.Context, period time.Duration, f func(context.Context)) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// peersEvery is how often replicas, quota servers and domain partitions
// are asked.
const peersEvery = 2 * time.Second

// sample records one point per listed resource and forgets resources
// not listed for a whole history.
func (d *Dashboard) sample(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, d.opts.Interval)
	defer cancel()
	s, err := d.opts.Source.Snapshot(sctx, "", 0, "")
	if err != nil {
		if ctx.Err() == nil {
			d.log.Debug("dashboard sample", "err", err)
		}
		return
	}
	t := s.Time.UnixMilli()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range s.Resources {
		h := d.hist[r.ID]
		if h == nil {
			h = &series{pts: make([]Point, int(d.opts.History/d.opts.Interval))}
			d.hist[r.ID] = h
		}
		if t <= h.last {
			// Not newer than the newest sample (two samples answered
			// within a millisecond, or a replica with a clock behind):
			// the chart and the stream keep their samples in time order.
			continue
		}
		h.add(Point{T: t, Capacity: r.Capacity, Granted: r.Granted, Wants: r.Wants, Outstanding: r.Outstanding})
	}
	for id, h := range d.hist {
		if t-h.last > d.opts.History.Milliseconds() {
			delete(d.hist, id)
		}
	}
}

// peers asks the node's replicas, the quota servers and the domain
// partitions' leaders for their STATS.
func (d *Dashboard) peers(ctx context.Context) {
	node := ""
	if s, err := d.opts.Source.Snapshot(ctx, "", 0, ""); err == nil {
		node = s.Node
	}
	var reps []Replica
	if rs, err := opstatus.GatherAll(ctx, d.opts.Conn, peerWait); err != nil {
		d.log.Debug("dashboard: list replicas", "err", err)
	} else {
		for _, r := range rs {
			// A reply without a configuration status (Err) still names the replica.
			if r.Node == node && r.ServerID != "" {
				reps = append(reps, Replica{ServerID: r.ServerID, Role: r.Role, Term: r.Term, Serving: r.Serving})
			}
		}
	}
	quota, err := gatherQuota(ctx, d.opts.Conn, node, peerWait)
	if err != nil {
		d.log.Debug("dashboard: list quota namespaces", "err", err)
	}
	domain, err := gatherDomain(ctx, d.opts.Conn, node, peerWait)
	if err != nil {
		d.log.Debug("dashboard: list domain partitions", "err", err)
	}
	d.mu.Lock()
	d.replicas, d.quota, d.domain = reps, quota, domain
	d.mu.Unlock()
}

// peerWait is how long replies to a STATS request are collected.
const peerWait = 300 * time.Millisecond

// Handler returns the dashboard's handler with its paths under prefix
// ("/dashboard" serves /dashboard/, /dashboard/events and
// /dashboard/snapshot; "" serves them at the root). It answers only the
// hosts and, with a token, the requests Options allow.
func (d *Dashboard) Handler(prefix string) http.Handler {
	prefix = strings.TrimSuffix(prefix, "/")
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+prefix+"/events", d.events)
	mux.HandleFunc("GET "+prefix+"/snapshot", d.snapshot)
	mux.Handle("GET "+prefix+"/", http.StripPrefix(prefix, d.static))
	if prefix != "" {
		mux.Handle("GET "+prefix, http.RedirectHandler(prefix+"/", http.StatusMovedPermanently))
	}
	return &guard{hosts: d.opts.AllowedHosts, token: d.opts.Token, path: prefix + "/", next: mux}
}

// query is what a page asks for.
type query struct {
	resource string
	top      int
	search   string
}

// parseQuery reads ?resource=&top=&q=, with a clear error for bad input.
func parseQuery(r *http.Request) (query, error) {
	v := r.URL.Query()
	q := query{resource: v.Get("resource"), top: DefaultTop, search: v.Get("q")}
	if s := v.Get("top"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > status.MaxSnapshotClaimants {
			return q, fmt.Errorf("top=%q: want a whole number from 0 to %d", s, status.MaxSnapshotClaimants)
		}
		q.top = n
	}
	if len(q.search) > status.MaxSnapshotSearch {
		return q, fmt.Errorf("q is %d bytes long: at most %d", len(q.search), status.MaxSnapshotSearch)
	}
	if len(q.resource) > 1024 {
		return q, fmt.Errorf("resource is %d bytes long: at most 1024", len(q.resource))
	}
	return q, nil
}

// event builds the event for q; since is the newest point already sent
// (unix ms; -1 sends the whole history).
func (d *Dashboard) event(ctx context.Context, q query, since int64) Event {
	ev := Event{Top: q.top, Reset: since < 0, HistoryMS: d.opts.History.Milliseconds()}
	sctx, cancel := context.WithTimeout(ctx, 5*d.opts.Interval)
	defer cancel()
	s, err := d.opts.Source.Snapshot(sctx, q.resource, q.top, q.search)
	if err != nil {
		ev.Error = err.Error()
	}
	ev.Snapshot = s
	d.mu.Lock()
	if h := d.hist[q.resource]; h != nil {
		ev.Points = h.since(since)
	}
	ev.Replicas, ev.Quota, ev.Domain = d.replicas, d.quota, d.domain
	d.mu.Unlock()
	if ev.Points == nil {
		ev.Points = []Point{}
	}
	if ev.Quota == nil {
		ev.Quota = []QuotaNamespace{}
	}
	if ev.Domain == nil {
		ev.Domain = []DomainPartition{}
	}
	return ev
}

// snapshot serves one Event as JSON: for scripts and curl.
func (d *Dashboard) snapshot(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(d.event(r.Context(), q, -1))
}

// events streams an Event every interval as server-sent events named
// "state", until the client goes away.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	// A server's write timeout must not end the stream.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(d.opts.Interval)
	defer tick.Stop()
	since := int64(-1)
	for {
		ev := d.event(r.Context(), q, since)
		if n := len(ev.Points); n > 0 {
			since = ev.Points[n-1].T
		} else if since < 0 {
			since = 0
		}
		data, err := json.Marshal(ev)
		if err != nil {
			d.log.Error("dashboard: encode event", "err", err)
			return
		}
		// One line of JSON: no newline can end the event early.
		if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", data); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.ended:
			return
		case <-tick.C:
		}
	}
}
