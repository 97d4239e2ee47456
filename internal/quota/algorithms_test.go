package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The reference models below restate each algorithm's definition in the
// most direct way (unpruned histories, levels that go negative, binary
// search instead of closed forms); the property tests check that the
// table answers exactly as they do. Times are ns from an arbitrary
// origin; maxWait is the effective one.
type model interface {
	take(now, n, maxWait int64) (ok bool, wait int64)
}

// tbModel: a level in token×ns that fills at one per ns up to size and
// may go negative (debt); a taker waits until the level is back at 0.
type tbModel struct {
	level, last, interval, capNs, debt int64
}

func (m *tbModel) take(now, n, maxWait int64) (bool, int64) {
	m.level = min(m.capNs, m.level+(now-m.last))
	m.last = now
	wait := max(0, n*m.interval-m.level)
	if wait > min(maxWait, m.debt) {
		return false, 0
	}
	m.level -= n * m.interval
	return true, wait
}

// lbModel: a FIFO queue of jobs, each draining n×interval; a taker waits
// for the jobs ahead of it, and the undrained work never exceeds size.
type lbModel struct {
	jobs            [][2]int64 // start, end
	interval, capNs int64
}

func (m *lbModel) take(now, n, maxWait int64) (bool, int64) {
	var queued, end int64
	end = now
	for _, j := range m.jobs {
		queued += max(0, j[1]-max(now, j[0]))
		end = max(end, j[1])
	}
	if queued+n*m.interval > m.capNs || end-now > maxWait {
		return false, 0
	}
	m.jobs = append(m.jobs, [2]int64{end, end + n*m.interval})
	return true, end - now
}

// gcraModel: ITU-T I.371's continuous-state leaky bucket.
type gcraModel struct {
	x, lct, t, tau int64
}

func (m *gcraModel) take(now, n, maxWait int64) (bool, int64) {
	x := max(0, m.x-(now-m.lct))
	wait := max(0, x+n*m.t-m.tau)
	if wait > maxWait {
		return false, 0
	}
	m.x, m.lct = x+n*m.t, now
	return true, wait
}

// fwModel: a count per aligned window; in arrival order, a request takes
// effect in the window of max(now, last admission) or the one after, and
// never after the window that follows its arrival's.
type fwModel struct {
	count      map[int64]int64
	last, w, l int64
}

func (m *fwModel) take(now, n, maxWait int64) (bool, int64) {
	t0 := max(now, m.last)
	k := t0 / m.w
	for _, c := range []struct{ k, at int64 }{{k, t0}, {k + 1, (k + 1) * m.w}} {
		if m.count[c.k]+n <= m.l {
			if c.at-now > maxWait || c.k > now/m.w+1 {
				return false, 0
			}
			m.count[c.k] += n
			m.last = c.at
			return true, c.at - now
		}
	}
	return false, 0
}

// swlModel: every admission kept; the earliest t ≥ max(now, last) at which
// the admissions in (t−W, t] leave room, trying t0 and each expiry.
type swlModel struct {
	log        [][2]int64
	last, w, l int64
}

func (m *swlModel) take(now, n, maxWait int64) (bool, int64) {
	t0 := max(now, m.last)
	cands := []int64{t0}
	for _, e := range m.log {
		if e[0]+m.w > t0 {
			cands = append(cands, e[0]+m.w)
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i] < cands[j] })
	for _, t := range cands {
		var sum int64
		for _, e := range m.log {
			if e[0] > t-m.w && e[0] <= t {
				sum += e[1]
			}
		}
		if sum+n <= m.l {
			if t-now > maxWait {
				return false, 0
			}
			m.log = append(m.log, [2]int64{t, n})
			m.last = t
			return true, t - now
		}
	}
	return false, 0
}

// swcModel: counts per window; the estimate prev×(end−t)/W + cur,
// binary-searched for the earliest t in the window of max(now, last) or
// the next one, and never after the window that follows now's.
type swcModel struct {
	count      map[int64]int64
	last, w, l int64
}

// fits reports whether n more at t in window k keep the estimate within
// the limit (multiplied through by W; the test's numbers are small).
func (m *swcModel) fits(k, t, n int64) bool {
	return m.count[k-1]*((k+1)*m.w-t)+(m.count[k]+n)*m.w <= m.l*m.w
}

func (m *swcModel) take(now, n, maxWait int64) (bool, int64) {
	t0 := max(now, m.last)
	k0 := t0 / m.w
	for k := k0; k <= k0+1; k++ {
		lo, hi := max(t0, k*m.w), (k+1)*m.w-1
		if !m.fits(k, hi, n) {
			continue
		}
		for lo < hi {
			mid := lo + (hi-lo)/2
			if m.fits(k, mid, n) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		if lo-now > maxWait || k > now/m.w+1 {
			return false, 0
		}
		m.count[k] += n
		m.last = lo
		return true, lo - now
	}
	return false, 0
}

// randomSpec returns a small spec of algorithm a, so that edges are hit
// often, with its reference model.
func randomSpec(r *rand.Rand, a Algorithm) (Spec, model) {
	s := Spec{Algorithm: a, WaitTimeout: time.Duration(r.IntN(3000)), MaxTokensPerRequest: 1000}
	switch a {
	case TokenBucket, LeakyBucket:
		s.Size = 1 + r.Int64N(10)
		s.FillRate = 1e9 / float64(1+r.IntN(100)) // an exact interval
		s.MaxDebt = time.Duration(r.IntN(3000))
	default:
		s.Limit = 1 + r.Int64N(10)
		s.Window = time.Duration(1 + r.IntN(1000))
		if a == GCRA {
			s.Window = time.Duration(s.Limit * int64(1+r.IntN(100)))
			s.Size = r.Int64N(10)
		}
	}
	c, err := compile(&s)
	if err != nil {
		panic(err)
	}
	switch a {
	case TokenBucket:
		return s, &tbModel{level: c.capNs, interval: c.interval, capNs: c.capNs, debt: c.debt}
	case LeakyBucket:
		return s, &lbModel{interval: c.interval, capNs: c.capNs}
	case GCRA:
		return s, &gcraModel{t: c.interval, tau: c.capNs}
	case FixedWindow:
		return s, &fwModel{count: map[int64]int64{}, w: c.window, l: c.capacity}
	case SlidingWindowLog:
		return s, &swlModel{w: c.window, l: c.capacity}
	}
	return s, &swcModel{count: map[int64]int64{}, w: c.window, l: c.capacity}
}

var algorithms = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter, GCRA}

func oneBucket(s Spec, opts Options) *Table {
	return NewTable(&Config{Namespaces: map[string]*Namespace{"p": {Buckets: map[string]*Spec{"b": &s}}}}, opts)
}

// TestAlgorithmsMatchModels drives each algorithm through the Table with
// random arrivals, token counts and max waits, and checks every decision
// against the reference model, and the admissions against the
// algorithm's limit.
func TestAlgorithmsMatchModels(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			for seed := range uint64(60) {
				r := rand.New(rand.NewPCG(seed, uint64(a)))
				s, m := randomSpec(r, a)
				tab := oneBucket(s, Options{})
				c := tab.spaces["p"].named["b"]
				now := int64(1e12)
				var admitted []admission
				// From overload (a quarter of the time per token) to
				// light load (twice it).
				step := max(c.interval, c.window/c.capacity, 1) * int64(1<<(seed%4)) / 2
				for i := range 300 {
					now += r.Int64N(step + 1)
					n := r.Int64N(min(c.maxTokens, c.capacity) + 1)
					if a == TokenBucket && seed%2 == 1 {
						// Borrowing beyond the size: checked against the
						// model only, as one request may exceed the size.
						n = r.Int64N(2*c.capacity + 1)
					}
					maxWait := time.Duration(-1)
					if r.IntN(3) == 0 {
						maxWait = time.Duration(r.IntN(2000))
					}
					mw := int64(s.WaitTimeout)
					if maxWait >= 0 {
						mw = min(mw, int64(maxWait))
					}
					if a == SlidingWindowLog {
						mw = min(mw, c.window)
					}
					d, key := tab.Take("p", "b", Request{Tokens: n, MaxWait: maxWait}, now)
					if key != "p:b" {
						t.Fatalf("key %q", key)
					}
					if n == 0 {
						if d.Status != OK {
							t.Fatalf("peek: %+v", d)
						}
						continue
					}
					ok, wait := m.take(now, n, mw)
					got := d.Status != Rejected
					if got != ok || (ok && int64(d.Wait) != wait) {
						t.Fatalf("seed %d step %d spec %+v: take %d at %d (max wait %d): got %v wait %d (%s), model %v wait %d",
							seed, i, s, n, now, mw, d.Status, d.Wait, d.Reason, ok, wait)
					}
					if ok {
						if (wait == 0) != (d.Status == OK) {
							t.Fatalf("status %v with wait %d", d.Status, wait)
						}
						admitted = append(admitted, admission{now + wait, n})
					} else if n > c.maxTokens && d.Reason == ReasonTooManyTokens {
						// A token bucket request beyond size + the
						// longest wait can never be admitted.
					} else if want := rejectReason(a, c, mw); d.Reason != want || d.RetryAfter <= 0 {
						t.Fatalf("rejection %+v, want reason %s", d, want)
					}
				}
				if l := tab.spaces["p"].buckets["b"].log; l != nil && l.n > 2*int(c.capacity) {
					t.Fatalf("seed %d: log of %d entries for limit %d", seed, l.n, c.capacity)
				}
				if a == TokenBucket && seed%2 == 1 {
					continue
				}
				if err := checkLimit(c, admitted); err != nil {
					t.Fatalf("seed %d spec %+v: %v", seed, s, err)
				}
			}
		})
	}
}

// TestWindowsLookOneWindowAhead: a FIXED_WINDOW or SLIDING_WINDOW_COUNTER
// request waits at most for the window after the one it arrives in, even
// when an earlier request already waits for that window (the bucket's
// clock is then in it). retry_after is when asking again can succeed.
func TestWindowsLookOneWindowAhead(t *testing.T) {
	type step struct {
		at     time.Duration
		n      int64
		status Status
		wait   time.Duration // or retry_after when REJECTED
	}
	w := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) // a window start
	ms := time.Millisecond
	for _, c := range []struct {
		spec  Spec
		steps []step
	}{
		{Spec{Algorithm: FixedWindow, Limit: 1}, []step{
			{300 * ms, 1, OK, 0},
			{300 * ms, 1, OKWait, 1700 * ms},   // the next window, W+2s
			{300 * ms, 1, Rejected, 1700 * ms}, // W+4s is two windows ahead: ask again at W+2s
			{1999 * ms, 1, Rejected, 1 * ms},
			{2 * time.Second, 1, OKWait, 2 * time.Second}, // now W+4s is the next window
			{2 * time.Second, 1, Rejected, 2 * time.Second},
		}},
		{Spec{Algorithm: SlidingWindowCounter, Limit: 2}, []step{
			{300 * ms, 2, OK, 0},
			{300 * ms, 1, OKWait, 2700 * ms},   // halfway into the next window: 1 + 2 × ½ = 2
			{300 * ms, 1, Rejected, 1700 * ms}, // W+4s is two windows ahead: ask again at W+2s
			{3 * time.Second, 1, OKWait, time.Second},
		}},
	} {
		c.spec.Window, c.spec.WaitTimeout, c.spec.MaxTokensPerRequest = 2*time.Second, 10*time.Second, c.spec.Limit
		tab := oneBucket(c.spec, Options{})
		for i, s := range c.steps {
			d := take(tab, "p:b", s.n, w.Add(s.at))
			got := d.Wait
			if d.Status == Rejected {
				got = d.RetryAfter
				if d.Reason != ReasonTimeout {
					t.Errorf("%v step %d: reason %q, want timeout", c.spec.Algorithm, i, d.Reason)
				}
			}
			if d.Status != s.status || got != s.wait {
				t.Errorf("%v step %d at W+%v: %v %v (%+v), want %v %v", c.spec.Algorithm, i, s.at, d.Status, got, d, s.status, s.wait)
			}
		}
	}
}

type admission struct{ at, n int64 }

// checkLimit checks the admissions (effective times) never exceed what the
// algorithm's definition allows, starting from a full bucket.
func checkLimit(c *compiled, adm []admission) error {
	sort.SliceStable(adm, func(i, j int) bool { return adm[i].at < adm[j].at })
	switch c.spec.Algorithm {
	case TokenBucket, GCRA:
		// In any span [a, b]: at most capacity + (b−a)/interval.
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].n
				if sum > c.capacity+(adm[j].at-adm[i].at)/c.interval {
					return fmt.Errorf("%d tokens in [%d, %d]", sum, adm[i].at, adm[j].at)
				}
			}
		}
	case LeakyBucket:
		for i := 1; i < len(adm); i++ {
			if adm[i].at < adm[i-1].at+adm[i-1].n*c.interval {
				return fmt.Errorf("job at %d starts before the one at %d drained", adm[i].at, adm[i-1].at)
			}
		}
	case FixedWindow:
		count := map[int64]int64{}
		for _, a := range adm {
			if count[a.at/c.window] += a.n; count[a.at/c.window] > c.capacity {
				return fmt.Errorf("window %d admitted %d", a.at/c.window, count[a.at/c.window])
			}
		}
	case SlidingWindowLog:
		for i, a := range adm {
			var sum int64
			for _, b := range adm[:i+1] {
				if b.at > a.at-c.window {
					sum += b.n
				}
			}
			if sum > c.capacity {
				return fmt.Errorf("%d in the window ending %d", sum, a.at)
			}
		}
	case SlidingWindowCounter:
		// At each admission, the estimate from what took effect by then.
		for i, a := range adm {
			k := a.at / c.window
			var prev, cur int64
			for _, b := range adm[:i+1] {
				switch b.at / c.window {
				case k - 1:
					prev += b.n
				case k:
					cur += b.n
				}
			}
			if prev*((k+1)*c.window-a.at)+cur*c.window > c.capacity*c.window {
				return fmt.Errorf("estimate over the limit at %d: prev %d cur %d", a.at, prev, cur)
			}
		}
	}
	return nil
}

// TestConcurrentTakesNeverExceed hammers one bucket per algorithm from
// several goroutines sharing a fake clock (so calls reach the table out
// of clock order) and checks the admissions against the limit.
func TestConcurrentTakesNeverExceed(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(a)))
			s, _ := randomSpec(r, a)
			tab := oneBucket(s, Options{})
			c := tab.spaces["p"].named["b"]
			var (
				mu    sync.Mutex
				clock = int64(1e12)
				adm   []admission
				wg    sync.WaitGroup
			)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for range 300 {
						mu.Lock()
						clock += r.Int64N(max(c.interval, c.window/max(1, c.capacity), 1))
						now := clock
						mu.Unlock()
						n := 1 + r.Int64N(min(c.maxTokens, c.capacity))
						d, _ := tab.Take("p", "b", Request{Tokens: n, MaxWait: -1}, now)
						if d.Status != Rejected {
							mu.Lock()
							adm = append(adm, admission{now + int64(d.Wait), n})
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			if len(adm) == 0 {
				t.Fatal("nothing admitted")
			}
			if err := checkLimit(c, adm); err != nil {
				t.Fatalf("spec %+v: %v", s, err)
			}
		})
	}
}

// drive sends steps random takes to p:b from time from and returns the
// admissions and the time of the last take.
func drive(tab *Table, r *rand.Rand, c *compiled, from int64, steps int) ([]admission, int64) {
	var adm []admission
	now := from
	step := max(c.interval, c.window/c.capacity, 1)
	for range steps {
		now += r.Int64N(step + 1)
		n := 1 + r.Int64N(min(c.maxTokens, c.capacity))
		d, _ := tab.Take("p", "b", Request{Tokens: n, MaxWait: -1}, now)
		if d.Status != Rejected {
			adm = append(adm, admission{now + int64(d.Wait), n})
		}
	}
	return adm, now
}

// TestFailoverNeverExceeds: a leader serves from full, a new one takes
// over with Since past the old one's last decision plus its longest wait;
// together they never admit more than the limit.
func TestFailoverNeverExceeds(t *testing.T) {
	for _, a := range algorithms {
		for seed := range uint64(30) {
			r := rand.New(rand.NewPCG(seed, 99))
			s, _ := randomSpec(r, a)
			old := oneBucket(s, Options{})
			c := old.spaces["p"].named["b"]
			adm, end := drive(old, r, c, 1e12, 200)
			since := end + int64(s.WaitTimeout)
			next := oneBucket(s, Options{Since: since})
			more, _ := drive(next, r, c, end+1, 1000)
			if len(more) == 0 {
				t.Fatalf("%v seed %d spec %+v: the new leader admitted nothing (old %d)", a, seed, s, len(adm))
			}
			if err := checkLimit(c, append(adm, more...)); err != nil {
				t.Fatalf("%v seed %d spec %+v: %v", a, seed, s, err)
			}
		}
	}
}

// TestReloadNeverExceeds: whatever the old and new specs, the admissions
// after a reload add nothing over the new limit to those made before it.
func TestReloadNeverExceeds(t *testing.T) {
	checked := 0
	for seed := range uint64(600) {
		r := rand.New(rand.NewPCG(seed, 5))
		s1, _ := randomSpec(r, algorithms[r.IntN(len(algorithms))])
		s2, _ := randomSpec(r, algorithms[r.IntN(len(algorithms))])
		switch r.IntN(3) {
		case 0: // same algorithm and rate or window
			s2, _ = randomSpec(r, s1.Algorithm)
			s2.FillRate, s2.Window = s1.FillRate, s1.Window
		case 1: // same algorithm
			s2, _ = randomSpec(r, s1.Algorithm)
		}
		tab := oneBucket(s1, Options{})
		c1 := tab.spaces["p"].named["b"]
		adm, end := drive(tab, r, c1, 1e12, 200)
		tab.SetConfig(&Config{Namespaces: map[string]*Namespace{"p": {Buckets: map[string]*Spec{"b": &s2}}}})
		c2 := tab.spaces["p"].named["b"]
		if checkLimit(c2, append([]admission(nil), adm...)) != nil {
			continue // the old admissions alone exceed the new limit
		}
		checked++
		more, _ := drive(tab, r, c2, end+1, 400)
		if err := checkLimit(c2, append(adm, more...)); err != nil {
			t.Fatalf("seed %d: %+v then %+v: %v", seed, s1, s2, err)
		}
	}
	if checked < 100 {
		t.Fatalf("only %d reloads checked", checked)
	}
}

// TestAdversarialInputs: extreme tokens, waits, clocks and names never
// panic, and a rejection for bad input leaves the bucket as it was.
func TestAdversarialInputs(t *testing.T) {
	extremes := []int64{math.MinInt64, -1, 0, 1, 2, 1 << 40, math.MaxInt64}
	times := []time.Time{time.Unix(0, 0), time.Unix(0, math.MaxInt64), time.Unix(0, math.MinInt64), t0, time.Time{}}
	r := rand.New(rand.NewPCG(1, 2))
	for _, a := range algorithms {
		s, _ := randomSpec(r, a)
		s.SoftLimit, s.CriticalReserve = 0.5, 0.2
		s.Ban = Ban{Threshold: 1000, Interval: time.Second, Duration: time.Second}
		tab := NewTable(&Config{Namespaces: map[string]*Namespace{"p": {Buckets: map[string]*Spec{"b": &s}, Dynamic: &s}}}, Options{})
		for range 2000 {
			req := Request{
				Tokens:    extremes[r.IntN(len(extremes))],
				MaxWait:   time.Duration(extremes[r.IntN(len(extremes))]),
				Sheddable: r.IntN(2) == 0,
				ClientID:  strings.Repeat("c", r.IntN(300)),
			}
			now := times[r.IntN(len(times))]
			name := []string{"b", "d", "", "bad name", strings.Repeat("x", 1000)}[r.IntN(5)]
			b := tab.spaces["p"].buckets["b"]
			var before bucket
			if b != nil {
				before = *b
			}
			d, _ := tab.Take("p", name, req, now.UnixNano())
			if b != nil && name == "b" && (d.Reason == ReasonBadRequest || d.Reason == ReasonTooManyTokens) && (b.s != before.s || b.mark != before.mark) {
				t.Fatalf("%v: refused %+v changed the bucket", a, req)
			}
			_ = tab.Report("p", name, extremes[r.IntN(len(extremes))], now.UnixNano())
			tab.Sweep(now.UnixNano())
		}
	}
}

// rejectReason is the reason a take refused for its wait gets: no_wait
// when no wait at all was allowed (mw, the request's and the bucket's
// longest wait, or a token bucket's max_debt, is 0), else timeout.
func rejectReason(a Algorithm, c *compiled, mw int64) string {
	if a == TokenBucket {
		mw = min(mw, c.debt)
	}
	if mw == 0 {
		return ReasonNoWait
	}
	return ReasonTimeout
}
