package heapfloor

import (
	"context"
	"math/rand/v2"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/allot/allot/internal/poll"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"no floor", 8 * mib, 0, 100, 100},
		{"gc off", 8 * mib, 64 * mib, -1, -1},
		{"small heap", 8 * mib, 64 * mib, 100, 700},
		{"nothing live yet: the runtime's minimum reaches the floor", 0, 64 * mib, 100, 1600},
		{"below the runtime's minimum", 1 * mib, 64 * mib, 100, 1600},
		{"half the floor", 32 * mib, 64 * mib, 100, 100},
		{"past the floor", 300 * mib, 64 * mib, 100, 100},
		{"a larger base stays", 8 * mib, 64 * mib, 1000, 1000},
		{"a floor below the runtime's minimum", 1 * mib, 2 * mib, 100, 100},
		{"a smaller base", 40 * mib, 64 * mib, 50, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percent(tc.live, tc.floor, tc.base); got != tc.want {
				t.Errorf("Percent(%d, %d, %d) = %d, want %d", tc.live, tc.floor, tc.base, got, tc.want)
			}
		})
	}
}

// The heap target the runtime derives from GOGC p reaches the floor (when
// Keep raised GOGC at all) and never passes it because of Keep.
func TestPercentKeepsTheFloor(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		live := r.Uint64N(1 << 34)
		floor := r.Uint64N(1 << 34)
		if r.IntN(4) == 0 {
			live = r.Uint64N(16 << 20)
		}
		base := r.IntN(500)
		p := Percent(live, floor, base)
		if p < base {
			t.Fatalf("Percent(%d, %d, %d) = %d: below the base", live, floor, base, p)
		}
		if p == base {
			continue
		}
		target := max(float64(live)*(1+float64(p)/100), minHeap*float64(p)/100)
		if target < float64(floor)-minHeap/100 {
			t.Fatalf("Percent(%d, %d, %d) = %d: heap target %.0f below the floor", live, floor, base, p, target)
		}
		if minHeap*float64(p)/100 > float64(floor) {
			t.Fatalf("Percent(%d, %d, %d) = %d: the runtime's minimum heap %.0f passes the floor", live, floor, base, p, minHeap*float64(p)/100)
		}
		if live > 0 && float64(live)*(1+float64(p-1)/100) >= float64(floor) && minHeap*float64(p-1)/100 >= float64(floor) {
			t.Fatalf("Percent(%d, %d, %d) = %d: %d reaches the floor too", live, floor, base, p, p-1)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		bad  bool
	}{
		{in: Default, want: 64 << 20},
		{in: "0", want: 0},
		{in: "64MiB", want: 64 << 20},
		{in: "64 MiB", want: 64 << 20},
		{in: "512KiB", want: 512 << 10},
		{in: "2GiB", want: 2 << 30},
		{in: "1048576", want: 1 << 20},
		{in: "100B", want: 100},
		{in: "", bad: true},
		{in: "MiB", bad: true},
		{in: "-1", bad: true},
		{in: "1.5GiB", bad: true},
		{in: "64MB", bad: true},
		{in: "2048GiB", bad: true},
		{in: "18446744073709551615GiB", bad: true},
	} {
		got, err := ParseSize(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseSize(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "64MiB", "1 GiB", "12B", "x", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n > 1<<40 {
			t.Fatalf("ParseSize(%q) = %d: past 1TiB", s, n)
		}
	})
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// Keep raises GOGC for a floor far above this test's heap, and sets it
// back when it ends.
func TestKeep(t *testing.T) {
	t.Setenv("GOGC", "100")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Keep(ctx, 1<<30, 10*time.Millisecond, nil)
	}()
	poll.Until(t, time.Minute, "GOGC raised for the floor", func() bool { return gogc() > 100 })
	cancel()
	<-done
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC after Keep ended: %d, want 100", got)
	}
}

// With GOGC=off, or no floor, Keep leaves GOGC alone and returns at once.
func TestKeepLeavesAlone(t *testing.T) {
	t.Setenv("GOGC", "off")
	before := gogc()
	Keep(context.Background(), 1<<30, time.Millisecond, nil) // returns at once, or the test hangs
	t.Setenv("GOGC", "100")
	Keep(context.Background(), 0, time.Millisecond, nil)
	if got := gogc(); got != before {
		t.Fatalf("GOGC %d after Keep did nothing, want %d", got, before)
	}
}
