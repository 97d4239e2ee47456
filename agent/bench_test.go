package agent

import (
	"context"
	"testing"

	"golang.org/x/time/rate"
)

// The benchmarks come in pairs so that ratios to golang.org/x/time/rate come
// from one run: both limiters have a high finite rate and a large burst, so
// every call is admitted without waiting and runs the token arithmetic.

const benchRate, benchBurst = 1e9, 1 << 30

func benchLimiter() *RateLimiter {
	l := newRateLimiter(nil, benchBurst)
	l.setLimit(benchRate)
	return l
}

func BenchmarkAllow(b *testing.B) {
	l := benchLimiter()
	b.ReportAllocs()
	for b.Loop() {
		l.Allow()
	}
}

func BenchmarkXRateAllow(b *testing.B) {
	l := rate.NewLimiter(benchRate, benchBurst)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow()
	}
}

func BenchmarkWait(b *testing.B) {
	l := benchLimiter()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkXRateWait(b *testing.B) {
	l := rate.NewLimiter(benchRate, benchBurst)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	l := benchLimiter()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow()
		}
	})
}

func BenchmarkXRateAllowParallel(b *testing.B) {
	l := rate.NewLimiter(benchRate, benchBurst)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow()
		}
	})
}

func BenchmarkGaugeAcquireRelease(b *testing.B) {
	g := newGauge()
	g.setLimit(Unlimited)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Acquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
		g.Release(1)
	}
}
