package quota

import (
	"testing"
	"time"
)

// TestDocExamples replays the worked examples of docs/quota.md.
func TestDocExamples(t *testing.T) {
	type step struct {
		at     time.Duration
		tokens int64
		status Status
		wait   time.Duration // or retry_after when REJECTED
		remain int64
		report bool // Report tokens instead
	}
	noon := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	min := func(m, s int) time.Duration { return time.Duration(m)*time.Minute + time.Duration(s)*time.Second }
	ms := time.Millisecond
	for _, ex := range []struct {
		spec  Spec
		steps []step
	}{
		{Spec{Algorithm: TokenBucket, Size: 10, FillRate: 2, WaitTimeout: 2 * time.Second, MaxDebt: 10 * time.Second, MaxTokensPerRequest: 10}, []step{
			{0, 10, OK, 0, 0, false},
			{0, 3, OKWait, 1500 * ms, 0, false},
			{0, 2, Rejected, 500 * ms, 0, false},
			{time.Second, 1, OKWait, time.Second, 0, false},
			{10 * time.Second, 0, OK, 0, 10, false},
		}},
		{Spec{Algorithm: LeakyBucket, Size: 4, FillRate: 2, WaitTimeout: 2 * time.Second, MaxTokensPerRequest: 4}, []step{
			{0, 1, OK, 0, 3, false},
			{0, 2, OKWait, 500 * ms, 1, false},
			{0, 2, Rejected, 500 * ms, 1, false},
			{time.Second, 2, OKWait, 500 * ms, 1, false},
		}},
		{Spec{Algorithm: FixedWindow, Limit: 3, Window: time.Minute, WaitTimeout: 30 * time.Second, MaxTokensPerRequest: 3}, []step{
			{min(0, 10), 2, OK, 0, 1, false},
			{min(0, 20), 2, Rejected, 10 * time.Second, 1, false},
			{min(0, 45), 2, OKWait, 15 * time.Second, 1, false},
			{min(0, 50), 1, OKWait, 10 * time.Second, 0, false},
		}},
		{Spec{Algorithm: FixedWindow, Limit: 1, Window: 2 * time.Second, WaitTimeout: 10 * time.Second, MaxTokensPerRequest: 1}, []step{
			{300 * ms, 1, OK, 0, 0, false},
			{300 * ms, 1, OKWait, 1700 * ms, 0, false},
			{300 * ms, 1, Rejected, 1700 * ms, 0, false},
			{2 * time.Second, 1, OKWait, 2 * time.Second, 0, false},
		}},
		{Spec{Algorithm: SlidingWindowLog, Limit: 2, Window: time.Minute, WaitTimeout: time.Second, MaxTokensPerRequest: 2}, []step{
			{min(0, 1), 1, OK, 0, 1, false},
			{min(0, 30), 1, OK, 0, 0, false},
			{min(0, 50), 1, Rejected, 10 * time.Second, 0, false},
			{min(1, 40), 1, OK, 0, 1, false},
		}},
		{Spec{Algorithm: SlidingWindowCounter, Limit: 7, Window: time.Minute, WaitTimeout: 10 * time.Second, MaxTokensPerRequest: 7}, []step{
			{min(0, 10), 5, OK, 0, 2, false},
			{min(1, 5), 3, 0, 0, 0, true},
			{min(1, 18), 1, OKWait, 6 * time.Second, 0, false},
		}},
		{Spec{Algorithm: GCRA, Limit: 10, Window: time.Second, Size: 3, WaitTimeout: time.Second, MaxTokensPerRequest: 3}, []step{
			{0, 3, OK, 0, 0, false},
			{0, 1, OKWait, 100 * ms, 0, false},
			{time.Second, 0, OK, 0, 3, false},
		}},
	} {
		tab := oneBucket(ex.spec, Options{})
		for i, s := range ex.steps {
			if s.report {
				if err := tab.Report("p", "b", s.tokens, noon.Add(s.at).UnixNano()); err != nil {
					t.Fatal(err)
				}
				continue
			}
			d := take(tab, "p:b", s.tokens, noon.Add(s.at))
			wait := d.Wait
			if d.Status == Rejected {
				wait = d.RetryAfter
			}
			if d.Status != s.status || wait != s.wait || d.Remaining != s.remain {
				t.Errorf("%v step %d: %+v, want %v %v remaining %d", ex.spec.Algorithm, i, d, s.status, s.wait, s.remain)
			}
		}
	}
}
