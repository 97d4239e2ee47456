package coordinator

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/subjects"
)

// MaxObservedResources bounds the resources an Observation names: the
// ones with the most outstanding; the others are summed in
// Observation.Other, so that metrics stay bounded however many resources
// clients name.
const MaxObservedResources = 100

// Observation is a snapshot of a coordinator (or replica) for metrics and
// health checks. Counters count since the coordinator started: a replica
// starts a new coordinator each time it wins the election.
type Observation struct {
	Node     string
	ServerID string
	// Parent is the parent node; empty on a root.
	Parent string
	// Role is the replica's role in the node's election; a Coordinator
	// run without a Replica reports itself leader.
	Role election.Role
	// Term is the term served while leading, else the leader's last seen.
	Term uint64
	// Leader is the leading replica's server id as last seen.
	Leader string
	// Serving is true while this process's coordinator answers requests.
	Serving bool
	// Failure says why the coordinator stopped serving on its own.
	Failure string
	// Coordinator reports whether the fields below describe a running
	// coordinator; false on a follower.
	Coordinator bool

	Rounds uint64
	// RoundSeconds is the distribution of round durations.
	RoundSeconds Histogram
	// Calls counts requests by subject, and error replies by subject and
	// code; see Call.
	Calls []Call
	// Lease-record activity: committed writes, failed writes, resource
	// rounds that waited for a write, stored records found not ours,
	// records ignored as forged.
	RecordWrites, RecordErrors, RecordWaits, ForeignRecords, ForgedRecords uint64
	// Silenced counts replies withheld because the coordinator could no
	// longer answer.
	Silenced uint64
	// Resources and Clients are the resources and client records kept.
	Resources, Clients int
	// Top are the resources with the most outstanding (at most
	// MaxObservedResources), refreshed every second; Other sums the
	// remaining resources.
	Top   []ledger.ResourceGauge
	Other ledger.ResourceTotals
	// ConfigGeneration is the generation of the templates in force.
	ConfigGeneration uint64
	// ConfigRejected counts template puts rejected as invalid, when the
	// templates come from a configuration watcher (else 0).
	ConfigRejected uint64
	// ConfigLoaded is false until the templates were read: while the
	// source's set has generation 0, as a configuration watcher's has
	// before its first read.
	ConfigLoaded bool
}

// Call counts requests to one endpoint subject (Code 0) or its error
// replies with one code.
type Call struct {
	// Subject is the endpoint: "capacity.get", "capacity.release",
	// "server.get" or "other" (an unknown operation).
	Subject string
	// Code is 0 for all requests received, else an error code sent (-1:
	// a code outside the documented ones).
	Code int
	N    uint64
}

// Histogram is a cumulative histogram of durations in seconds.
type Histogram struct {
	// Bounds are the buckets' upper bounds; Counts[i] counts observations
	// at most Bounds[i] (cumulative).
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// roundBounds are the round-duration buckets in seconds: a round takes
// microseconds when idle and should stay well under the round interval.
var roundBounds = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// roundHist is kept by the round loop and copied with stats.
type roundHist struct {
	counts [len(roundBounds) + 1]uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
}

func (h *roundHist) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(roundBounds) && s > roundBounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += s
}

func (h *roundHist) snapshot() Histogram {
	out := Histogram{Bounds: roundBounds[:], Counts: make([]uint64, len(roundBounds)), Sum: h.sum}
	for i, n := range h.counts {
		out.Count += n
		if i < len(roundBounds) {
			out.Counts[i] = out.Count
		}
	}
	return out
}

// callSubjects and callCodes are what calls are counted by: fixed sets,
// so that metrics labels stay bounded.
var (
	callSubjects = [...]string{"capacity.get", "capacity.release", "server.get", "other"}
	callCodes    = [...]int{0, CodeBadRequest, CodeNoTemplate, CodeTooLarge, CodeTooMany, CodeInternal, CodeNotImplemented, CodeUnavailable}
)

// calls counts requests and error replies from any goroutine.
type calls [len(callSubjects)][len(callCodes) + 1]atomic.Uint64 // last code column: any other code

// subjectIndex maps a subject of the node (allot.<node>.<endpoint> or
// allot.t.<tenant>.<node>.<endpoint>, as the subscriptions guarantee) to
// its endpoint, without allocating. Tenant requests count with the plain
// ones: no tenant or user becomes a label.
func subjectIndex(subject string) int {
	dots := 1
	if strings.HasPrefix(subject, subjects.TenantPrefix) {
		dots = 3
	}
	// allot.<node>.server.get.<child> counts as server.get.
	if i := strings.LastIndexByte(subject, '.'); i > 0 && strings.Count(subject, ".") == 4 && strings.HasSuffix(subject[:i], ".server.get") {
		subject = subject[:i]
	}
	for i, s := range callSubjects[:len(callSubjects)-1] {
		if n := len(subject) - len(s); n > 0 && subject[n-1] == '.' && subject[n:] == s && strings.Count(subject[:n-1], ".") == dots {
			return i
		}
	}
	return len(callSubjects) - 1
}

// countCall counts a request (code 0) or an error reply on subject.
func (c *Coordinator) countCall(subject string, code int) {
	j := len(callCodes)
	for k, cc := range callCodes {
		if cc == code {
			j = k
			break
		}
	}
	c.calls[subjectIndex(subject)][j].Add(1)
}

func (c *Coordinator) callCounts() []Call {
	var out []Call
	for i := range c.calls {
		for j := range c.calls[i] {
			n := c.calls[i][j].Load()
			if n == 0 {
				continue
			}
			code := -1 // another code
			if j < len(callCodes) {
				code = callCodes[j]
			}
			out = append(out, Call{Subject: callSubjects[i], Code: code, N: n})
		}
	}
	return out
}

// observeGauges refreshes the resource gauges; called by the round loop.
func (c *Coordinator) observeGauges(now int64) {
	c.stats.gauges, c.stats.rest = c.ledger.Gauges(now, MaxObservedResources)
	if c.opts.Shadow { // every resource is shadow, whatever its template says
		for i := range c.stats.gauges {
			c.stats.gauges[i].Shadow = true
		}
		c.stats.rest.Shadow = c.stats.rest.Count
	}
}

// Observe returns a snapshot of the coordinator; call it after Start. It
// is safe to call from any goroutine: it reads what the round loop last
// published (resource gauges are at most a second old) and never touches
// the ledger.
func (c *Coordinator) Observe() Observation {
	c.mu.Lock()
	s := c.statsSnap
	c.mu.Unlock()
	serving, failure := c.serving()
	o := Observation{
		Node: c.opts.Node, ServerID: c.opts.ServerID, Parent: c.opts.Parent,
		Role: election.RoleLeader, Term: c.Term(), Leader: c.opts.ServerID,
		Serving: serving, Coordinator: true,
		Rounds: s.rounds, RoundSeconds: s.hist.snapshot(), Calls: c.callCounts(),
		RecordWrites: s.ledger.RecordWrites, RecordErrors: s.ledger.RecordErrors, RecordWaits: s.ledger.Waits,
		ForeignRecords: s.foreignRecords, ForgedRecords: s.ledger.ForgedRecords, Silenced: c.gate.Silenced.Load(),
		Resources: s.ledger.Resources, Clients: s.ledger.Clients,
		Top: s.gauges, Other: s.rest,
	}
	if failure != nil {
		o.Failure = failure.Error()
	}
	observeConfig(&o, c.opts.Templates)
	return o
}

// observeConfig fills the configuration fields from the template source.
func observeConfig(o *Observation, src TemplateSource) {
	// A watcher's first set, built once it has read the bucket, is
	// generation 1.
	o.ConfigGeneration = src.Current().Generation
	o.ConfigLoaded = o.ConfigGeneration > 0
	if st, ok := src.(StatusSource); ok {
		if cs, ok := st.Status().(configkv.Status); ok {
			o.ConfigRejected = cs.RejectedPuts
		}
	}
}

// Observe returns a snapshot of the replica: its role and term, and while
// it leads its coordinator's Observation.
func (r *Replica) Observe() Observation {
	st := r.Status()
	c := r.coordinator()
	var o Observation
	if c != nil {
		o = c.Observe()
	} else {
		o = Observation{Node: st.Node, ServerID: st.ServerID, Parent: st.Parent}
		observeConfig(&o, r.opts.Templates)
	}
	o.Role, o.Term, o.Leader, o.Serving, o.Failure = st.Role, st.Term, st.Leader, st.Serving, st.Failure
	return o
}

// CodeLabel is the label value of an error code in a Call: the code in
// decimal, or "other".
func CodeLabel(code int) string {
	if code < 0 {
		return "other"
	}
	return strconv.Itoa(code)
}

// obs is the part of stats kept for Observe.
type obs struct {
	hist   roundHist
	gauges []ledger.ResourceGauge // replaced, never changed in place
	rest   ledger.ResourceTotals
}
