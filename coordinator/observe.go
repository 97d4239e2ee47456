package coordinator

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/status"
)

// MaxObservedResources bounds the resources an Observation names: the
// ones with the most outstanding; the others are summed in
// Observation.Other, so that metrics stay bounded however many resources
// clients name.
const MaxObservedResources = status.MaxObservedResources

// Observation is a snapshot of a coordinator (or replica) for metrics and
// health checks (status.Observation).
type Observation = status.Observation

// Call counts requests to one endpoint subject (Code 0) or its error
// replies with one code (status.Call).
type Call = status.Call

// Histogram is a cumulative histogram of durations in seconds
// (status.Histogram).
type Histogram = status.Histogram

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

// countCall counts a request (code 0) or an error reply on subject. A
// lease partition's subject (allot.<node>.<group>.p.<i>.<op>) counts as
// the node's (allot.<node>.<group>.<op>).
func (c *Coordinator) countCall(subject string, code int) {
	if c.partitioned() {
		if i := strings.LastIndex(subject, ".p."); i > 0 {
			if j := strings.IndexByte(subject[i+3:], '.'); j > 0 {
				subject = subject[:i] + subject[i+3+j:]
			}
		}
	}
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
		Partition: c.opts.Partition, Partitions: max(c.opts.Partitions, 1),
		Role: election.RoleLeader, Term: c.Term(), Leader: c.opts.ServerID,
		Serving: serving, Coordinator: true,
		Rounds: s.rounds, RoundSeconds: s.hist.snapshot(), Calls: c.callCounts(),
		RecordWrites: s.ledger.RecordWrites, RecordErrors: s.ledger.RecordErrors, RecordWaits: s.ledger.Waits,
		CutLeases: s.ledger.CutLeases, ForeignRecords: s.foreignRecords, ForgedRecords: s.ledger.ForgedRecords, Silenced: c.gate.Silenced.Load(),
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
	o.ConfigGeneration = sources.CurrentTemplates(src).Generation
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
		o = Observation{Node: st.Node, ServerID: st.ServerID, Parent: st.Parent,
			Partition: r.opts.Partition, Partitions: max(r.opts.Partitions, 1)}
		observeConfig(&o, r.opts.Templates)
	}
	o.Role, o.Term, o.Leader, o.Serving, o.Failure = st.Role, st.Term, st.Leader, st.Serving, st.Failure
	return o
}

// CodeLabel is the label value of an error code in a Call: the code in
// decimal, or "other".
func CodeLabel(code int) string { return status.CodeLabel(code) }

// obs is the part of stats kept for Observe.
type obs struct {
	hist   roundHist
	gauges []ledger.ResourceGauge // replaced, never changed in place
	rest   ledger.ResourceTotals
}
