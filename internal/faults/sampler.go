// Package faults holds allot's fault-injection test set and the small
// library it runs on: a sampler of the capacity in force at real agents,
// replicas started the way `allot coordinator` starts them (in this
// process or in a child process that can be stopped with a signal), and
// plain NATS clients speaking the wire protocol.
//
// Each scenario of the test set injects one fault (a lease record
// deleted, the state bucket deleted, a leader frozen past its election
// TTL, a NATS server restart, an invalid template put before a restart, a
// release racing a refresh, two `allot up` on one data directory; and on
// a level of three nats-server and three `allot coordinator` processes,
// TestClusterFaults: a server killed, the election stream's leader
// killed, two servers down for 15 s, a server frozen for 10 s, a server
// and then its coordinator killed) and reports, on one line per scenario,
//
//	FAULT <scenario> max_in_force_ratio=<r> samples=<n> ...
//
// where r is the largest sum, over all clients, of the capacity in force
// divided by the resource's capacity. It must never exceed 1. The cluster
// scenarios also print the fraction handed out over time (FAULT-SERIES:
// seconds from the fault, fraction of what the demand allows) and must
// hand out 90% within two refresh intervals of the service returning.
// To see the lines of passing scenarios, run
//
//	go test -race -count=1 -v ./internal/faults | grep FAULT
//
// or set ALLOT_FAULTS_REPORT to a file that collects them (see ReportEnv).
package faults

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot/allot/agent"
)

// SampleEvery is how often a Sampler polls the agents.
const SampleEvery = 15 * time.Millisecond

// InForce is the capacity a client may use at now for the resource st
// describes: its lease while unexpired, else what its mode allows (the
// safe capacity the coordinator reported in Safe mode until it ends,
// nothing before one was reported, since the agents here keep the
// default initial capacity of 0; the wants in Optimistic mode; nothing in
// Pessimistic mode). Unlimited is +Inf.
func InForce(st agent.Status, now time.Time) float64 {
	if st.Leased && now.Before(st.Expiry) {
		return st.Granted
	}
	switch st.Mode {
	case agent.Safe:
		if !st.SafeKnown {
			return 0
		}
		if st.SafeCapacity < 0 {
			return math.Inf(1)
		}
		if !st.SafeUntil.IsZero() && !now.Before(st.SafeUntil) {
			return 0 // the floor ended
		}
		return st.SafeCapacity
	case agent.Optimistic:
		return st.Wants
	default:
		return 0
	}
}

// Result is what a Sampler measured.
type Result struct {
	// Max is the largest sum of capacity in force over capacity.
	Max float64
	// Samples is the number of samples taken.
	Samples int
	// At is when the maximum was seen, from the sampler's start.
	At time.Duration
	// Worst describes the clients at the maximum: per source, how many
	// and their sum.
	Worst string
}

// Sampler polls the status of a set of agents every SampleEvery and keeps
// the largest sum of their capacity in force for one resource, as a
// fraction of its capacity.
type Sampler struct {
	resource string
	capacity float64

	mu sync.Mutex
	// lowered, once set, is the capacity samples are measured against
	// from loweredFrom on (see Lower).
	lowered     float64
	loweredFrom time.Time
	agents      []*agent.Agent
	res         Result
	series      []Point
	start       time.Time
	stop        chan struct{}
	done        chan struct{}
}

// NewSampler returns a sampler of resource, whose capacity is capacity;
// add agents and Start it.
func NewSampler(resource string, capacity float64) *Sampler {
	return &Sampler{resource: resource, capacity: capacity}
}

// Lower says the capacity was lowered to capacity now: samples taken
// after grace are measured against it (leases granted before the change
// stay out until they are refreshed or end, so give a lease length and
// two refresh intervals), those before against the old capacity.
func (s *Sampler) Lower(capacity float64, grace time.Duration) {
	s.mu.Lock()
	s.lowered, s.loweredFrom = capacity, time.Now().Add(grace)
	s.mu.Unlock()
}

// Add includes agents in the samples from now on.
func (s *Sampler) Add(as ...*agent.Agent) {
	s.mu.Lock()
	s.agents = append(s.agents, as...)
	s.mu.Unlock()
}

// Start starts sampling in the background; the test's cleanup stops it.
func (s *Sampler) Start(tb testing.TB) {
	s.start = time.Now()
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	go s.run()
	tb.Cleanup(func() { s.Stop() })
}

// Stop ends sampling and returns the result. It may be called again.
func (s *Sampler) Stop() Result {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res
}

func (s *Sampler) run() {
	defer close(s.done)
	t := time.NewTicker(SampleEvery)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

type part struct {
	n   int
	sum float64
}

func (s *Sampler) sample() {
	s.mu.Lock()
	agents := slices.Clone(s.agents)
	s.mu.Unlock()
	total, used, wants := 0.0, 0.0, 0.0
	parts := map[string]*part{}
	at := time.Now()
	for _, a := range agents {
		now := time.Now()
		for _, st := range a.Status() {
			if st.ResourceID != s.resource {
				continue
			}
			c := InForce(st, now)
			total += c
			used += min(c, st.Wants)
			wants += st.Wants
			src := "safe"
			if st.Leased && now.Before(st.Expiry) {
				src = "lease"
			} else if st.Mode != agent.Safe {
				src = st.Mode.String()
			}
			p := parts[src]
			if p == nil {
				p = &part{}
				parts[src] = p
			}
			p.n++
			p.sum += c
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	capacity := s.capacity
	if s.lowered > 0 && !time.Now().Before(s.loweredFrom) {
		capacity = s.lowered
	}
	ratio := total / capacity
	if allowed := min(capacity, wants); allowed > 0 {
		s.series = append(s.series, Point{At: at, HandedOut: used / allowed})
	}
	s.res.Samples++
	if ratio > s.res.Max || s.res.Samples == 1 {
		s.res.Max = ratio
		s.res.At = time.Since(s.start).Round(time.Millisecond)
		s.res.Worst = describe(parts)
	}
}

// Point is one sample of the fraction handed out: the capacity in force
// that the clients can use (each one's capped by its wants) over what
// the demand allows (the capacity, or the sum of the wants if smaller).
type Point struct {
	At        time.Time
	HandedOut float64
}

// Series returns the fraction handed out at every sample so far.
func (s *Sampler) Series() []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.series)
}

func describe(parts map[string]*part) string {
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d=%.4g", k, parts[k].n, parts[k].sum)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// Tolerance is the rounding allowed above a ratio of 1.
const Tolerance = 1e-9

// ReportEnv names the environment variable that, when set to a file path,
// makes Report append every FAULT line to that file as well: `go test`
// shows a passing test's log only with -v, and CI may want the lines
// either way.
const ReportEnv = "ALLOT_FAULTS_REPORT"

// Report logs r on the scenario's FAULT line, with extra key=value pairs,
// and fails the test if the ratio exceeded 1.
func Report(tb testing.TB, scenario string, r Result, extra ...string) {
	tb.Helper()
	line := fmt.Sprintf("FAULT %s max_in_force_ratio=%.3f samples=%d at=%s worst=%s", scenario, r.Max, r.Samples, r.At, r.Worst)
	if len(extra) > 0 {
		line += " " + strings.Join(extra, " ")
	}
	tb.Log(line)
	if path := os.Getenv(ReportEnv); path != "" {
		if err := appendLine(path, line); err != nil {
			tb.Errorf("%s: %v", ReportEnv, err)
		}
	}
	if r.Samples == 0 {
		tb.Errorf("%s: no samples taken", scenario)
	}
	if r.Max > 1+Tolerance {
		tb.Errorf("%s: capacity in force reached %.3f× capacity (at %s: %s); want at most 1", scenario, r.Max, r.At, r.Worst)
	}
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open fault report: %w", err)
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		_ = f.Close()
		return fmt.Errorf("write fault report: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close fault report: %w", err)
	}
	return nil
}

// SeriesLine renders the fraction handed out every step, as seconds from
// zero: "-3.0:0.98 -2.5:0.98 ...".
func SeriesLine(series []Point, zero time.Time, step time.Duration) string {
	var b strings.Builder
	next := time.Time{}
	for _, p := range series {
		if p.At.Before(next) {
			continue
		}
		fmt.Fprintf(&b, "%.1f:%.2f ", p.At.Sub(zero).Seconds(), p.HandedOut)
		next = p.At.Add(step)
	}
	return strings.TrimSpace(b.String())
}
