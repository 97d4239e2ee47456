package quota

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func tb(size int64, rate float64) *Spec {
	s := DefaultSpec()
	s.Size, s.FillRate, s.MaxTokensPerRequest = size, rate, size
	return &s
}

func window(a Algorithm, limit int64, w time.Duration) *Spec {
	s := DefaultSpec()
	s.Algorithm, s.Size, s.FillRate, s.Limit, s.Window = a, 0, 0, limit, w
	return &s
}

func take(tab *Table, bucket string, n int64, now time.Time) Decision {
	ns, name, _ := strings.Cut(bucket, ":")
	d, _ := tab.Take(ns, name, Request{Tokens: n, MaxWait: -1}, now.UnixNano())
	return d
}

func TestLookupOrder(t *testing.T) {
	dyn := tb(10, 1)
	cfg := &Config{Namespaces: map[string]*Namespace{
		"named":    {Buckets: map[string]*Spec{"a": tb(1, 1)}, Dynamic: dyn, Default: tb(3, 1), MaxDynamicBuckets: 1},
		"deflt":    {Default: tb(3, 1)},
		"global":   {Buckets: map[string]*Spec{"a": tb(1, 1)}},
		"_default": {Default: tb(5, 1)},
	}}
	tab := NewTable(cfg, Options{})
	for _, c := range []struct {
		ns, name, key, reason string
		limit                 int64
	}{
		{"named", "a", "named:a", "", 1},
		{"named", "x", "named:x", "", 10},           // dynamic
		{"named", "x", "named:x", "", 10},           // the same one again
		{"named", "y", "", ReasonTooManyBuckets, 0}, // over the cap
		{"named", "bad-name", "", ReasonBadRequest, 0},
		{"deflt", "q", "deflt:<default>", "", 3},
		{"deflt", "r", "deflt:<default>", "", 3},
		{"global", "q", "_default:<default>", "", 5},
		{"unknown", "q", "_default:<default>", "", 5},
	} {
		d, key := tab.Take(c.ns, c.name, Request{Tokens: 1, MaxWait: -1}, t0.UnixNano())
		if key != c.key || d.Reason != c.reason || d.Limit != c.limit {
			t.Errorf("%s:%s: got %q %+v, want %q reason %q limit %d", c.ns, c.name, key, d, c.key, c.reason, c.limit)
		}
	}
	// Resolve agrees with Take, without creating anything.
	for _, c := range []struct{ ns, name, key, how string }{
		{"named", "a", "named:a", FoundNamed},
		{"named", "zz", "named:zz", FoundDynamic},
		{"deflt", "q", "deflt:<default>", FoundDefault},
		{"unknown", "q", "_default:<default>", FoundGlobalDefault},
	} {
		key, spec, how, err := cfg.Resolve(c.ns, c.name)
		if key != c.key || how != c.how || spec == nil || err != nil {
			t.Errorf("Resolve(%s, %s) = %q %q %v", c.ns, c.name, key, how, err)
		}
	}
	if _, _, _, err := cfg.Resolve("named", "bad-name"); err == nil {
		t.Error("Resolve accepted a bad dynamic name")
	}
	// The default bucket is shared: deflt took 2 of 3.
	if d := take(tab, "deflt:z", 0, t0); d.Remaining != 1 {
		t.Errorf("shared default: remaining %d, want 1", d.Remaining)
	}
	delete(cfg.Namespaces, "_default")
	tab = NewTable(cfg, Options{})
	if d, key := tab.Take("unknown", "q", Request{Tokens: 1}, t0.UnixNano()); d.Reason != ReasonNoBucket || key != "" {
		t.Errorf("no global default: %+v %q", d, key)
	}
	if _, _, _, err := cfg.Resolve("unknown", "q"); err == nil || !strings.Contains(err.Error(), ReasonNoBucket) {
		t.Errorf("Resolve without a global default: %v", err)
	}
	if ev := tab.Events()[GlobalDefault]; ev.BucketMiss != 1 {
		t.Errorf("unknown namespace miss counted under _default: %+v", ev)
	}
	if tab.Len() != 0 {
		t.Errorf("Len %d", tab.Len())
	}
}

func TestTakeBasics(t *testing.T) {
	s := tb(10, 10) // 100ms per token
	s.MaxTokensPerRequest = 5
	s.WaitTimeout = 300 * time.Millisecond
	s.MaxDebt = time.Second
	tab := oneBucket(*s, Options{})
	steps := []struct {
		n       int64
		maxWait time.Duration
		want    Decision
	}{
		{0, -1, Decision{Status: OK, Limit: 10, Remaining: 10}},                     // peek
		{6, -1, Decision{Status: Rejected, Reason: ReasonTooManyTokens, Limit: 10}}, // over max_tokens_per_request
		{-1, -1, Decision{Status: Rejected, Reason: ReasonBadRequest, Limit: 10}},
		{5, -1, Decision{Status: OK, Limit: 10, Remaining: 5}},
		{5, -1, Decision{Status: OK, Limit: 10, Remaining: 0}},
		{2, -1, Decision{Status: OKWait, Wait: 200 * time.Millisecond, Limit: 10}},
		// 4 more would wait 600ms > 300ms: refused, nothing taken.
		{4, -1, Decision{Status: Rejected, Reason: ReasonTimeout, Limit: 10, RetryAfter: 300 * time.Millisecond}},
		// max_wait lowers the timeout, 0 means now or never: "no_wait".
		{1, 0, Decision{Status: Rejected, Reason: ReasonNoWait, Limit: 10, RetryAfter: 300 * time.Millisecond}},
		{1, 250 * time.Millisecond, Decision{Status: Rejected, Reason: ReasonTimeout, Limit: 10, RetryAfter: 50 * time.Millisecond}},
		// A huge max_wait cannot raise it.
		{2, time.Duration(math.MaxInt64), Decision{Status: Rejected, Reason: ReasonTimeout, Limit: 10, RetryAfter: 100 * time.Millisecond}},
		{1, -1, Decision{Status: OKWait, Wait: 300 * time.Millisecond, Limit: 10}},
		{0, -1, Decision{Status: OK, Limit: 10}},
	}
	for i, st := range steps {
		d, _ := tab.Take("p", "b", Request{Tokens: st.n, MaxWait: st.maxWait}, t0.UnixNano())
		if d != st.want {
			t.Fatalf("step %d: take %d: got %+v, want %+v", i, st.n, d, st.want)
		}
	}
	// More than size + the longest wait's worth can never be admitted.
	s.MaxTokensPerRequest = 100
	if tab := oneBucket(*s, Options{}); take(tab, "p:b", 14, t0).Reason != ReasonTooManyTokens || take(tab, "p:b", 13, t0).Status != OKWait {
		t.Errorf("tokens beyond size + wait not refused as too many")
	}
	// A second later the debt is paid and 7 tokens are back.
	if d := take(tab, "p:b", 0, at(time.Second)); d.Remaining != 7 {
		t.Errorf("after 1s: %+v", d)
	}
	ev := tab.Events()["p"]
	if ev.Served != 2 || ev.ServedWait != 2 || ev.Tokens != 13 || ev.Timeout != 3 || ev.NoWait != 1 || ev.TooManyTokens != 1 || ev.BadRequest != 1 {
		t.Errorf("events %+v", ev)
	}
}

func TestSoftLimitReserveBan(t *testing.T) {
	s := tb(10, 1)
	s.SoftLimit = 0.5
	s.CriticalReserve = 0.3
	tab := oneBucket(*s, Options{})
	sh := Request{Tokens: 3, MaxWait: -1, Sheddable: true}
	if d, _ := tab.Take("p", "b", sh, t0.UnixNano()); d.Status != OK || d.Warning != "" || d.Remaining != 7 {
		t.Fatalf("first: %+v", d)
	}
	if d, _ := tab.Take("p", "b", sh, t0.UnixNano()); d.Status != OK || d.Warning != WarningSoftLimit || d.Remaining != 4 {
		t.Fatalf("past the soft limit: %+v", d)
	}
	// 3 more would leave 1 < the 3 reserved: a sheddable request is
	// refused, until enough has filled; a critical one is served.
	if d, _ := tab.Take("p", "b", sh, t0.UnixNano()); d.Reason != ReasonReserved || d.RetryAfter != 2*time.Second {
		t.Fatalf("sheddable into the reserve: %+v", d)
	}
	if d, _ := tab.Take("p", "b", Request{Tokens: 3, MaxWait: -1}, t0.UnixNano()); d.Status != OK || d.Remaining != 1 {
		t.Fatalf("critical: %+v", d)
	}
	// A sheddable request never waits.
	if d, _ := tab.Take("p", "b", Request{Tokens: 1, MaxWait: -1, Sheddable: true}, t0.UnixNano()); d.Reason != ReasonReserved {
		t.Fatalf("sheddable waiting: %+v", d)
	}
	ev := tab.Events()["p"]
	if ev.Reserved != 2 || ev.SoftLimit != 2 {
		t.Errorf("events %+v", ev)
	}

	// Ban: more than 5 tokens asked within 1s bans for 10s, per client.
	s = window(FixedWindow, 100, time.Minute)
	s.Ban = Ban{Threshold: 5, Interval: time.Second, Duration: 10 * time.Second}
	tab = oneBucket(*s, Options{})
	req := Request{Tokens: 2, MaxWait: -1, ClientID: "mallory"}
	for i, want := range []string{"", "", ReasonBanned, ReasonBanned} {
		d, _ := tab.Take("p", "b", req, at(time.Duration(i)*100*time.Millisecond).UnixNano())
		if d.Reason != want {
			t.Fatalf("take %d: %+v, want reason %q", i, d, want)
		}
		if want == ReasonBanned && d.RetryAfter != 10*time.Second-time.Duration(i-2)*100*time.Millisecond {
			t.Fatalf("take %d: retry after %v", i, d.RetryAfter)
		}
	}
	if d, _ := tab.Take("p", "b", Request{Tokens: 2, MaxWait: -1, ClientID: "alice"}, at(time.Second).UnixNano()); d.Status != OK {
		t.Fatalf("another client is not banned: %+v", d)
	}
	if d, _ := tab.Take("p", "b", req, at(10*time.Second+200*time.Millisecond).UnixNano()); d.Status != OK {
		t.Fatalf("after the ban: %+v", d)
	}
	if ev := tab.Events()["p"]; ev.Banned != 2 {
		t.Errorf("events %+v", ev)
	}
	if tab.Sweep(at(time.Hour).UnixNano()); len(tab.bans) != 0 {
		t.Errorf("ban trackers kept: %d", len(tab.bans))
	}
}

// TestSince checks a table started after a failover treats every bucket
// as drained at Since.
func TestSince(t *testing.T) {
	since := Options{Since: t0.UnixNano()}
	for _, c := range []struct {
		spec      *Spec
		after     time.Duration
		remaining int64
	}{
		{tb(100, 10), 2 * time.Second, 20},
		{tb(100, 10), time.Hour, 100},
		{window(FixedWindow, 10, time.Minute), 0, 0},
		{window(SlidingWindowLog, 10, time.Minute), 59 * time.Second, 0},
		{window(SlidingWindowLog, 10, time.Minute), time.Minute, 10},
		{window(SlidingWindowCounter, 10, time.Minute), time.Minute + 30*time.Second, 5},
		{window(GCRA, 10, time.Second), 500 * time.Millisecond, 5},
	} {
		if c.spec.Algorithm == FixedWindow || c.spec.Algorithm == SlidingWindowCounter {
			// Align Since to a window so the expectation is simple.
			since.Since = t0.UnixNano() / int64(time.Minute) * int64(time.Minute)
		} else {
			since.Since = t0.UnixNano()
		}
		tab := oneBucket(*c.spec, since)
		if d := take(tab, "p:b", 0, time.Unix(0, since.Since).Add(c.after)); d.Remaining != c.remaining {
			t.Errorf("%v after %v: remaining %d, want %d", c.spec.Algorithm, c.after, d.Remaining, c.remaining)
		}
		if tab := oneBucket(*c.spec, Options{}); take(tab, "p:b", 0, t0).Remaining != tab.spaces["p"].named["b"].capacity {
			t.Errorf("%v: zero Since does not start full", c.spec.Algorithm)
		}
	}
}

func TestSetConfig(t *testing.T) {
	ns := func(b *Spec) *Config {
		return &Config{Namespaces: map[string]*Namespace{"p": {Buckets: map[string]*Spec{"b": b}, Dynamic: tb(5, 1)}}}
	}
	tab := NewTable(ns(tb(10, 1)), Options{})
	take(tab, "p:b", 8, t0)
	take(tab, "p:dyn", 5, t0)
	// Unchanged: state kept.
	tab.SetConfig(ns(tb(10, 1)))
	if d := take(tab, "p:b", 0, t0); d.Remaining != 2 {
		t.Fatalf("unchanged spec lost its state: %+v", d)
	}
	if d := take(tab, "p:dyn", 0, t0); d.Remaining != 0 {
		t.Fatalf("dynamic bucket lost its state: %+v", d)
	}
	// Same rate: the tokens are kept, cut to a smaller size, and fill up
	// to a bigger one.
	soft := tb(10, 1)
	soft.SoftLimit = 0.5
	tab.SetConfig(ns(soft))
	if d := take(tab, "p:b", 0, t0); d.Remaining != 2 || d.Warning != WarningSoftLimit {
		t.Fatalf("soft limit added: %+v", d)
	}
	tab.SetConfig(ns(tb(1, 1)))
	if d := take(tab, "p:b", 0, t0); d.Remaining != 1 {
		t.Fatalf("smaller size: %+v", d)
	}
	tab.SetConfig(ns(tb(100, 1)))
	if d := take(tab, "p:b", 0, at(3*time.Second)); d.Remaining != 4 {
		t.Fatalf("bigger size: %+v, want 1 + 3 filled since", d)
	}
	// Another rate: restarts drained at its last use (3s), so it is not
	// full at once.
	tab.SetConfig(ns(tb(100, 2)))
	if d := take(tab, "p:b", 0, at(5*time.Second)); d.Remaining != 4 {
		t.Fatalf("changed rate: %+v, want 4 tokens filled in 2s", d)
	}
	// Window with the same window keeps its counts under the new limit.
	tab.SetConfig(ns(window(FixedWindow, 10, time.Hour)))
	tab.SetConfig(ns(window(FixedWindow, 10, time.Hour))) // no-op
	w := at(2 * time.Hour).Truncate(time.Hour)
	take(tab, "p:b", 5, w)
	tab.SetConfig(ns(window(FixedWindow, 7, time.Hour)))
	if d := take(tab, "p:b", 0, w); d.Remaining != 2 {
		t.Fatalf("window kept counts: %+v", d)
	}
	// A different window restarts drained: nothing before the next window.
	tab.SetConfig(ns(window(SlidingWindowLog, 7, time.Minute)))
	if d, _ := tab.Take("p", "b", Request{Tokens: 1}, w.Add(59*time.Second).UnixNano()); d.Status != Rejected {
		t.Fatalf("drained restart admitted: %+v", d)
	}
	if d := take(tab, "p:b", 1, w.Add(59*time.Second)); d.Status != OKWait || d.Wait != time.Second {
		t.Fatalf("drained restart: %+v, want a wait to the window's end", d)
	}
	if d := take(tab, "p:b", 1, w.Add(time.Minute+time.Second)); d.Status != OK {
		t.Fatalf("after a window: %+v", d)
	}
	// Removed buckets are dropped.
	if tab.Len() != 2 {
		t.Fatalf("Len %d", tab.Len())
	}
	tab.SetConfig(&Config{Namespaces: map[string]*Namespace{"p": {}}})
	if tab.Len() != 0 || tab.Events()["p"].Removed != 2 {
		t.Fatalf("Len %d events %+v", tab.Len(), tab.Events()["p"])
	}
	if d, _ := tab.Take("p", "b", Request{Tokens: 1}, w.UnixNano()); d.Reason != ReasonNoBucket {
		t.Fatalf("removed bucket answered: %+v", d)
	}
}

func TestSweep(t *testing.T) {
	dyn := tb(10, 1) // 10s to refill
	dyn.MaxIdle = 2 * time.Second
	tab := NewTable(&Config{Namespaces: map[string]*Namespace{"p": {Dynamic: dyn, MaxDynamicBuckets: 2}}}, Options{})
	take(tab, "p:a", 10, t0)
	take(tab, "p:b", 1, t0)
	if d := take(tab, "p:c", 1, t0); d.Reason != ReasonTooManyBuckets {
		t.Fatalf("cap: %+v", d)
	}
	if n := tab.Sweep(at(time.Second).UnixNano()); n != 0 {
		t.Fatalf("swept %d before max_idle", n)
	}
	// b is idle and full again after 2s; a needs 10s to refill.
	if n := tab.Sweep(at(2 * time.Second).UnixNano()); n != 1 || tab.Len() != 1 {
		t.Fatalf("swept %d, Len %d", n, tab.Len())
	}
	if d := take(tab, "p:a", 0, at(2*time.Second)); d.Remaining != 2 {
		t.Fatalf("a lost its state: %+v", d)
	}
	if n := tab.Sweep(at(12 * time.Second).UnixNano()); n != 1 || tab.Len() != 0 {
		t.Fatalf("swept %d, Len %d", n, tab.Len())
	}
	ev := tab.Events()["p"]
	if ev.DynamicCreated != 2 || ev.Removed != 2 || ev.TooManyBuckets != 1 {
		t.Fatalf("events %+v", ev)
	}
}

func TestReport(t *testing.T) {
	s := tb(10, 1)
	s.MaxDebt = 5 * time.Second
	tab := oneBucket(*s, Options{})
	if err := tab.Report("p", "b", 4, t0.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if d := take(tab, "p:b", 0, t0); d.Remaining != 6 {
		t.Fatalf("after report: %+v", d)
	}
	// A huge report leaves at most max_debt of debt.
	if err := tab.Report("p", "b", math.MaxInt64, t0.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if d := take(tab, "p:b", 0, at(5*time.Second)); d.Remaining != 0 {
		t.Fatalf("debt forgiven too early: %+v", d)
	}
	if d := take(tab, "p:b", 0, at(6*time.Second)); d.Remaining != 1 {
		t.Fatalf("debt beyond max_debt kept: %+v", d)
	}
	if err := tab.Report("p", "b", -1, t0.UnixNano()); err == nil {
		t.Fatal("negative report accepted")
	}
	if err := tab.Report("q", "b", 1, t0.UnixNano()); err == nil || !strings.Contains(err.Error(), ReasonNoBucket) {
		t.Fatalf("report to no bucket: %v", err)
	}
	for _, a := range algorithms[1:] {
		s := window(a, 10, time.Minute)
		if a == LeakyBucket {
			s = tb(10, 1)
			s.Algorithm = LeakyBucket
		}
		tab := oneBucket(*s, Options{})
		for _, n := range []int64{1000, math.MaxInt64} {
			if err := tab.Report("p", "b", n, t0.UnixNano()); err != nil {
				t.Fatal(err)
			}
			if d := take(tab, "p:b", 0, t0); d.Remaining != 0 {
				t.Errorf("%v: report of %d not charged: %+v", a, n, d)
			}
		}
		// Charged as "fully used at t0", no more: a full window or
		// queue later, the bucket is full again.
		if d := take(tab, "p:b", 0, at(2*time.Minute)); d.Remaining != 10 {
			t.Errorf("%v: a huge report kept: %+v", a, d)
		}
	}
}

// TestManyDynamicNames: 100k distinct names from one client in a second
// keep the cap, and every refusal changes nothing.
func TestManyDynamicNames(t *testing.T) {
	tab := NewTable(&Config{Namespaces: map[string]*Namespace{"p": {Dynamic: tb(10, 1), MaxDynamicBuckets: 1000}}}, Options{})
	refused := 0
	for i := range 100_000 {
		d, _ := tab.Take("p", fmt.Sprintf("k%d", i), Request{Tokens: 1}, at(time.Duration(i)*10*time.Microsecond).UnixNano())
		if d.Reason == ReasonTooManyBuckets {
			refused++
		}
	}
	if tab.Len() != 1000 || refused != 99_000 {
		t.Fatalf("Len %d, refused %d", tab.Len(), refused)
	}

	// Peeks and refused requests create nothing, so they cannot fill the
	// cap; they are answered as a new bucket would answer them.
	tab = NewTable(&Config{Namespaces: map[string]*Namespace{"p": {Dynamic: tb(10, 1), MaxDynamicBuckets: 1000}}}, Options{})
	for i := range 10_000 {
		name := fmt.Sprintf("k%d", i)
		for _, c := range []struct {
			n    int64
			want Decision
		}{
			{0, Decision{Status: OK, Limit: 10, Remaining: 10}},
			{11, Decision{Status: Rejected, Reason: ReasonTooManyTokens, Limit: 10}},
			{-1, Decision{Status: Rejected, Reason: ReasonBadRequest, Limit: 10}},
		} {
			if d, key := tab.Take("p", name, Request{Tokens: c.n}, t0.UnixNano()); d != c.want || key != "p:"+name {
				t.Fatalf("take %d from new %s: %+v %q", c.n, name, d, key)
			}
		}
		if err := tab.Report("p", name, 0, t0.UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	if tab.Len() != 0 || tab.Events()["p"].DynamicCreated != 0 {
		t.Fatalf("Len %d, events %+v", tab.Len(), tab.Events()["p"])
	}
}

func TestValidate(t *testing.T) {
	def := DefaultSpec()
	if err := def.Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	for _, c := range []struct {
		edit func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Algorithm = 0 }, "algorithm"},
		{func(s *Spec) { s.FillRate = math.NaN() }, "fill_rate"},
		{func(s *Spec) { s.FillRate = -1 }, "fill_rate"},
		{func(s *Spec) { s.FillRate = math.Inf(1) }, "fill_rate"},
		{func(s *Spec) { s.Size = 0 }, "size"},
		{func(s *Spec) { s.Size = 1e15 }, "size"},
		{func(s *Spec) { s.FillRate = 1e-9 }, "size"},
		{func(s *Spec) { s.WaitTimeout = -1 }, "wait_timeout"},
		{func(s *Spec) { s.MaxDebt = 2 * MaxDuration }, "max_debt"},
		{func(s *Spec) { s.MaxIdle = -time.Second }, "max_idle"},
		{func(s *Spec) { s.MaxTokensPerRequest = 0 }, "max_tokens_per_request"},
		{func(s *Spec) { s.SoftLimit = math.NaN() }, "soft_limit"},
		{func(s *Spec) { s.SoftLimit = 1 }, "soft_limit"},
		{func(s *Spec) { s.CriticalReserve = -0.1 }, "critical_reserve"},
		{func(s *Spec) { s.Ban.Threshold = 5 }, "ban.interval"},
		{func(s *Spec) { s.Algorithm = FixedWindow }, "limit"},
		{func(s *Spec) { s.Algorithm, s.Limit = SlidingWindowCounter, 5 }, "window"},
		{func(s *Spec) { s.Algorithm, s.Limit, s.Window = SlidingWindowLog, MaxLogLimit+1, time.Second }, "limit"},
		{func(s *Spec) { s.Algorithm, s.Limit, s.Window, s.Size = GCRA, 1, MaxDuration, 10 }, "size"},
	} {
		s := DefaultSpec()
		c.edit(&s)
		err := s.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want+":") {
			t.Errorf("%+v: got %v, want an error about %s", s, err, c.want)
		}
	}
	cfg := &Config{Namespaces: map[string]*Namespace{"p": {Buckets: map[string]*Spec{"b": {}}}, "bad name": {}}}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "buckets.b: algorithm") || !strings.Contains(err.Error(), `namespace "bad name"`) {
		t.Fatalf("config: %v", err)
	}
	// SetConfig skips what Validate rejects.
	tab := NewTable(cfg, Options{})
	if d, _ := tab.Take("p", "b", Request{Tokens: 1}, t0.UnixNano()); d.Reason != ReasonNoBucket {
		t.Fatalf("invalid bucket answered: %+v", d)
	}
}

func TestNames(t *testing.T) {
	for s, want := range map[string]bool{"a": true, "A_9": true, "": false, "a-b": false, "é": false, "a:b": false,
		strings.Repeat("x", MaxNameLen): true, strings.Repeat("x", MaxNameLen+1): false} {
		if ValidName(s) != want {
			t.Errorf("ValidName(%q) = %v", s, !want)
		}
	}
	if ns, name, err := SplitBucket("logins:alice"); ns != "logins" || name != "alice" || err != nil {
		t.Errorf("SplitBucket: %q %q %v", ns, name, err)
	}
	for _, s := range []string{"logins", ":a", "a:", "a:b:c", "a b:c", strings.Repeat("x", 100_000) + ":a"} {
		if _, _, err := SplitBucket(s); err == nil || len(err.Error()) > 400 {
			t.Errorf("SplitBucket(%.20q): %v", s, err)
		}
	}
}

// roomy returns a table with bucket p:b of algorithm a that admits a
// token every microsecond without ever waiting.
func roomy(a Algorithm) *Table {
	s := window(a, 1_000_000_000, time.Second)
	switch a {
	case TokenBucket, LeakyBucket:
		s = tb(1_000_000, 1e9)
		s.Algorithm = a
	case SlidingWindowLog:
		s = window(a, MaxLogLimit, time.Millisecond)
	}
	return oneBucket(*s, Options{})
}

// TestTakeDoesNotAllocate: an existing bucket costs no allocation.
func TestTakeDoesNotAllocate(t *testing.T) {
	for _, a := range algorithms {
		tab := roomy(a)
		now := t0
		allocs := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Microsecond)
			if d, _ := tab.Take("p", "b", Request{Tokens: 1, MaxWait: -1}, now.UnixNano()); d.Status != OK {
				t.Fatalf("%v: %+v", a, d)
			}
		})
		// The log of SLIDING_WINDOW_LOG grows by appending; amortized.
		if allocs > 0 && !(a == SlidingWindowLog && allocs < 0.1) {
			t.Errorf("%v: %v allocs per Take", a, allocs)
		}
	}
}

// TestSlidingLogBounded: reports cannot grow the log past the limit, and
// the ring shrinks back after a burst.
func TestSlidingLogBounded(t *testing.T) {
	tab := oneBucket(*window(SlidingWindowLog, 10_000, time.Second), Options{})
	log := func() *swLog { return tab.spaces["p"].buckets["b"].log }
	for i := range 20_000 {
		if err := tab.Report("p", "b", 1, at(time.Duration(i)).UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	if l := log(); l.n > 10_000 || l.sum != 10_000 {
		t.Fatalf("log of %d entries, %d tokens", l.n, l.sum)
	}
	if d := take(tab, "p:b", 0, at(0)); d.Remaining != 0 {
		t.Fatalf("reports not charged: %+v", d)
	}
	for i := range 20 {
		take(tab, "p:b", 1, at(time.Duration(i+2)*time.Second))
	}
	if l := log(); len(l.ring) > 64 || l.n != 1 {
		t.Fatalf("ring of %d for %d entries after the burst", len(l.ring), l.n)
	}
}
