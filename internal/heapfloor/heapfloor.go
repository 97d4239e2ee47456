// Package heapfloor keeps the garbage collector's heap target at least a
// floor while the live heap is small.
//
// Go's collector starts a cycle when the heap has grown by GOGC percent
// of what the last one left live (and at least 4 MiB × GOGC/100). A
// server whose live heap is a few MiB (a coordinator with a few thousand
// leases, a quota or domain partition) but which allocates at the rate
// of its requests (nats.go makes a header map for every message) then
// collects many times a second, and each cycle costs it a fixed part
// (marking the roots, waking the workers, flushing write barriers) on
// top of the live heap's. Measured on a coordinator answering 80,000
// lease requests a second, GOGC 800 cut its CPU per request by about a
// sixth. A larger GOGC for every heap would multiply a large heap (a
// million leases) as well, so Keep raises GOGC only as far as the floor
// needs: the heap may grow to the floor, never past it because of Keep,
// and once the live heap is past the floor GOGC is back at its base.
// GOMEMLIMIT still bounds the heap as usual.
package heapfloor

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// Default is the floor allot's servers keep unless told otherwise, as
// ParseSize reads it: enough that a small server's collector runs about
// once a second at tens of thousands of requests a second, little beside
// what a NATS server takes.
const Default = "64MiB"

// DefaultEvery is how often Keep looks at the live heap. The live heap
// changes once a cycle; a server's grows with its clients, over seconds.
const DefaultEvery = time.Second

// minHeap is the runtime's smallest heap target at GOGC 100: it grows
// with GOGC (4 MiB × GOGC/100), so Percent keeps GOGC at most where it
// reaches the floor.
const minHeap = 4 << 20

// maxFloor is the largest floor Percent heeds (ParseSize's bound): the
// arithmetic then stays far from overflowing.
const maxFloor = 1 << 40

// Percent returns the GOGC that gives a live heap of live bytes a heap
// target of at least floor, and never less than base, the GOGC the
// process was started with. A base below 0 (GOGC=off) is returned as it
// is: the collector is off. A floor of 0 returns base.
func Percent(live, floor uint64, base int) int {
	if base < 0 || floor == 0 {
		return base
	}
	// The runtime's minimum heap, 4 MiB × GOGC/100, reaches the floor
	// at this GOGC (within 1% of 4 MiB); above it a small live heap
	// would get a target past the floor.
	top := min(floor, maxFloor) * 100 / minHeap
	p := top
	if live > 0 && live < floor {
		// target = live × (1 + GOGC/100) ≥ floor, rounded up.
		p = min(p, ((floor-live)*100+live-1)/live)
	} else if live >= floor {
		p = 0
	}
	if p <= uint64(max(base, 0)) {
		return base
	}
	return int(p)
}

// Base returns the GOGC the process was started with, as the runtime
// reads its environment variable: "off" is -1, unset or not a number is
// 100.
func Base() int {
	v := os.Getenv("GOGC")
	if v == "off" {
		return -1
	}
	if n, err := strconv.ParseInt(v, 10, 32); err == nil {
		return int(n)
	}
	return 100
}

// ParseSize reads a size in bytes: a whole number, optionally followed
// by KiB, MiB or GiB (or B); "0" is none. It is what --heap-floor takes.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n > math.MaxUint64/mult || n*mult > 1<<40 {
		return 0, fmt.Errorf("heap floor %q: want a whole number of bytes up to 1TiB, with KiB, MiB or GiB if wanted (such as 64MiB), or 0 for none", s)
	}
	return n * mult, nil
}

// Keep sets GOGC to Percent of the live heap, floor and Base, every
// every, until ctx ends; it then sets GOGC back to Base and returns. A
// floor of 0, or GOGC=off, does nothing. Several Keep of one process
// (servers run side by side in one test) agree, as they all compute
// from the environment.
func Keep(ctx context.Context, floor uint64, every time.Duration, log *slog.Logger) {
	base := Base()
	if floor == 0 || base < 0 {
		return
	}
	if every <= 0 {
		every = DefaultEvery
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	set := math.MinInt // the first look sets GOGC whatever it finds
	apply := func() {
		metrics.Read(sample)
		var live uint64
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = sample[0].Value.Uint64()
		}
		if p := Percent(live, floor, base); p != set {
			debug.SetGCPercent(p)
			if log != nil {
				log.Debug("heap floor: GOGC set", "gogc", p, "live_bytes", live, "floor_bytes", floor)
			}
			set = p
		}
	}
	apply()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			debug.SetGCPercent(base)
			return
		case <-t.C:
			apply()
		}
	}
}

// Start runs Keep on a goroutine of its own until ctx ends or the
// function it returns is called, which waits for Keep to set GOGC back.
func Start(ctx context.Context, floor uint64, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Keep(ctx, floor, DefaultEvery, log)
	}()
	return func() { cancel(); <-done }
}
