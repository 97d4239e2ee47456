package envoyrl_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot/allot/internal/envoyrl"
)

func limiter(t *testing.T, doc string, opts envoyrl.Options) *envoyrl.Limiter {
	t.Helper()
	ds, err := envoyrl.Parse("t.yaml", []byte(doc), envoyrl.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyrl.NewConfig(ds, envoyrl.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return envoyrl.NewLimiter(cfg, &envoyrl.MemoryStore{}, opts)
}

func decide(t *testing.T, lim *envoyrl.Limiter, unix int64, r *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := lim.ShouldRateLimit(context.Background(), time.Unix(unix, 0), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A window of unit_multiplier units starts at a multiple of its length
// from the epoch, like the reference's one-unit windows.
func TestUnitMultiplierWindows(t *testing.T) {
	lim := limiter(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 2, name: five}\n", envoyrl.Options{})
	const start = 1_800_000_000 - 1_800_000_000%300 // a window start
	r := req("d", d("k", "v"))
	for _, tc := range []struct {
		at        int64
		code      rlspb.RateLimitResponse_Code
		remaining uint32
		reset     int64
	}{
		{start + 10, rlspb.RateLimitResponse_OK, 1, 290},
		{start + 200, rlspb.RateLimitResponse_OK, 0, 100},
		{start + 299, rlspb.RateLimitResponse_OVER_LIMIT, 0, 1},
		{start + 300, rlspb.RateLimitResponse_OK, 1, 300},
	} {
		st := decide(t, lim, tc.at, r).GetStatuses()[0]
		if st.GetCode() != tc.code || st.GetLimitRemaining() != tc.remaining || st.GetDurationUntilReset().GetSeconds() != tc.reset {
			t.Errorf("at +%d: %v", tc.at-start, st)
		}
		cl := st.GetCurrentLimit()
		if cl.GetUnitMultiplier().GetValue() != 5 || cl.GetName() != "five" || cl.GetUnit() != rlspb.RateLimitResponse_RateLimit_MINUTE {
			t.Errorf("current_limit %v", cl)
		}
	}
}

func TestOverrideUnitMultiplier(t *testing.T) {
	o := func(m *wrapperspb.UInt32Value, unit typev3.RateLimitUnit) *rlspb.RateLimitRequest {
		desc := override(1, unit, d("k", "v"))
		desc.Limit.UnitMultiplier = m
		return req("d", desc)
	}
	const at = 1_800_000_000 - 1_800_000_000%600 + 30
	for _, tc := range []struct {
		name  string
		opts  envoyrl.Options
		req   *rlspb.RateLimitRequest
		reset int64
		err   string
	}{
		{"honoured", envoyrl.Options{}, o(wrapperspb.UInt32(10), typev3.RateLimitUnit_MINUTE), 570, ""},
		{"reference ignores it", envoyrl.Options{Reference: true}, o(wrapperspb.UInt32(10), typev3.RateLimitUnit_MINUTE), 30, ""},
		{"zero", envoyrl.Options{}, o(wrapperspb.UInt32(0), typev3.RateLimitUnit_MINUTE), 0, "unit_multiplier 0"},
		{"unknown unit", envoyrl.Options{}, o(nil, typev3.RateLimitUnit_UNKNOWN), 0, "invalid unit 0"},
		{"unit out of range", envoyrl.Options{Reference: true}, o(nil, typev3.RateLimitUnit(42)), 0, "invalid unit 42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := limiter(t, "domain: d\n", tc.opts)
			resp, err := lim.ShouldRateLimit(context.Background(), time.Unix(at, 0), tc.req)
			if tc.err != "" {
				var re *envoyrl.RequestError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want a *RequestError %q", resp, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetStatuses()[0].GetDurationUntilReset().GetSeconds(); got != tc.reset {
				t.Errorf("reset in %d s, want %d", got, tc.reset)
			}
		})
	}
}

type failingStore struct{ envoyrl.MemoryStore }

func (*failingStore) Increment(context.Context, time.Time, []envoyrl.Increment) ([]uint64, error) {
	return nil, errors.New("partition unavailable")
}

func TestStoreErrorFailsTheRequest(t *testing.T) {
	ds, _ := envoyrl.Parse("t.yaml", []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"), envoyrl.ParseOptions{})
	cfg, _ := envoyrl.NewConfig(ds, envoyrl.ConfigOptions{})
	lim := envoyrl.NewLimiter(cfg, &failingStore{}, envoyrl.Options{})
	_, err := lim.ShouldRateLimit(context.Background(), time.Unix(1, 0), req("d", d("k", "v")))
	if err == nil || !strings.Contains(err.Error(), "partition unavailable") {
		t.Errorf("got %v", err)
	}
	// A request no limit applies to touches no counter.
	if _, err := lim.ShouldRateLimit(context.Background(), time.Unix(1, 0), req("d", d("other", "v"))); err != nil {
		t.Errorf("unlimited request: %v", err)
	}
}

func TestMemoryStore(t *testing.T) {
	ctx := context.Background()
	var s envoyrl.MemoryStore
	t0 := time.Unix(1000, 0)
	got, err := s.Increment(ctx, t0, []envoyrl.Increment{
		{Key: "a", Hits: 2, Expires: t0.Add(time.Minute)},
		{Key: "a", Hits: 3, Expires: t0.Add(time.Minute)},
		{Key: "b", Hits: 0, Expires: t0.Add(time.Second)},
	})
	if err != nil || got[0] != 2 || got[1] != 5 || got[2] != 0 {
		t.Fatalf("got %v, %v", got, err)
	}
	// Overflow: all or nothing.
	if _, err := s.Increment(ctx, t0, []envoyrl.Increment{
		{Key: "a", Hits: 1, Expires: t0.Add(time.Minute)},
		{Key: "a", Hits: 1 << 63, Expires: t0.Add(time.Minute)},
	}); err == nil {
		t.Fatal("an overflowing addition succeeded")
	}
	if v, _ := s.Get(ctx, t0, []string{"a", "zz"}); v[0] != 5 || v[1] != 0 {
		t.Fatalf("after a failed addition: %v", v)
	}
	// Expired counters read as zero, start again, and are swept.
	later := t0.Add(time.Minute)
	if v, _ := s.Get(ctx, later, []string{"a"}); v[0] != 0 {
		t.Errorf("expired counter reads %d", v[0])
	}
	if got, _ := s.Increment(ctx, later, []envoyrl.Increment{{Key: "c", Hits: 1, Expires: later.Add(time.Second)}}); got[0] != 1 {
		t.Errorf("fresh counter %d", got[0])
	}
	if n := s.Len(); n != 1 {
		t.Errorf("%d counters after the sweep, want 1", n)
	}
}

// Property: with one hit per request, a counter admits exactly
// min(requests, limit) requests in each window, whatever the order and
// mix of values, and every answer's remaining is limit minus the hits so
// far.
func TestAdmitsTheLimitPerWindow(t *testing.T) {
	lim := limiter(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 3}\n", envoyrl.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	type window struct {
		value string
		start int64
	}
	seen := map[window]int{}
	unix := int64(1_800_000_000)
	for i := 0; i < 5000; i++ {
		unix += int64(rng.IntN(3))
		v := string(rune('a' + rng.IntN(4)))
		st := decide(t, lim, unix, req("d", d("k", v))).GetStatuses()[0]
		w := window{v, unix - unix%10}
		seen[w]++
		n := seen[w]
		wantOK := n <= 3
		if (st.GetCode() == rlspb.RateLimitResponse_OK) != wantOK {
			t.Fatalf("request %d of %v: %v", n, w, st)
		}
		if wantOK && st.GetLimitRemaining() != uint32(3-n) {
			t.Fatalf("request %d of %v: remaining %d", n, w, st.GetLimitRemaining())
		}
		if st.GetDurationUntilReset().GetSeconds() != w.start+10-unix {
			t.Fatalf("reset %v at %d", st.GetDurationUntilReset(), unix)
		}
	}
}

// Concurrent requests at one instant share one counter: exactly the
// limit is admitted.
func TestConcurrentRequestsAdmitTheLimit(t *testing.T) {
	lim := limiter(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 50}\n", envoyrl.Options{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				resp, err := lim.ShouldRateLimit(context.Background(), time.Unix(3600, 0), req("d", d("k", "v")))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if ok != 50 {
		t.Errorf("%d admitted, want 50", ok)
	}
}

// The reference's counter key is visible to a Store: the later server
// shards counters by it.
func TestCounterKeys(t *testing.T) {
	rec := &recordingStore{}
	ds, _ := envoyrl.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    descriptors: [{key: s, value: x*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 1}}]\n"), envoyrl.ParseOptions{})
	cfg, _ := envoyrl.NewConfig(ds, envoyrl.ConfigOptions{})
	lim := envoyrl.NewLimiter(cfg, rec, envoyrl.Options{KeyPrefix: "p:"})
	r := req("d", d("k", "v", "s", "xyz"))
	if _, err := lim.ShouldRateLimit(context.Background(), time.Unix(1_800_000_030, 0), r); err != nil {
		t.Fatal(err)
	}
	want := envoyrl.Increment{Key: "p:d_k_v_s_x*_1800000000", Hits: 1, Expires: time.Unix(1_800_000_060, 0)}
	if len(rec.incs) != 1 || rec.incs[0] != want {
		t.Errorf("increments %v, want %v", rec.incs, want)
	}
}

type recordingStore struct {
	envoyrl.MemoryStore
	incs []envoyrl.Increment
}

func (s *recordingStore) Increment(ctx context.Context, now time.Time, incs []envoyrl.Increment) ([]uint64, error) {
	s.incs = append(s.incs, incs...)
	return s.MemoryStore.Increment(ctx, now, incs)
}

func TestNoConfiguration(t *testing.T) {
	lim := envoyrl.NewLimiter(nil, &envoyrl.MemoryStore{}, envoyrl.Options{})
	_, err := lim.ShouldRateLimit(context.Background(), time.Unix(1, 0), req("d", d("k", "v")))
	var re *envoyrl.RequestError
	if !errors.As(err, &re) || re.Msg != "no rate limit configuration loaded" {
		t.Errorf("got %v", err)
	}
}

// BenchmarkShouldRateLimit decides a request of three descriptors (two
// limited, one unmatched) on a MemoryStore.
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg := loadConfigDir(b, referenceConfig)
	lim := envoyrl.NewLimiter(cfg, &envoyrl.MemoryStore{}, envoyrl.Options{Headers: envoyrl.XRateLimitHeaderNames()})
	r := req("basic", d("client", "alice"), d("parent", "p", "child", "c"), d("other", "x"))
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := lim.ShouldRateLimit(ctx, time.Unix(int64(1_800_000_000+i/1000), 0), r); err != nil {
			b.Fatal(err)
		}
	}
}
