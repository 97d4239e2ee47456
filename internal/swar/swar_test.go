package swar

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestFirst: for words of random and chosen bytes, First of each test
// (and of their union) is the first byte a byte-at-a-time check finds,
// and a test marks nothing when no byte matches.
func TestFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	special := []byte{0, 1, 0x1f, 0x20, '"', '.', '\\', 0x7e, 0x7f, 0x80, 0xff}
	tests := []struct {
		name string
		mark func(x uint64) uint64
		is   func(c byte) bool
	}{
		{"Zero", Zero, func(c byte) bool { return c == 0 }},
		{"dot", func(x uint64) uint64 { return Zero(x ^ Lo*'.') }, func(c byte) bool { return c == '.' }},
		{"Below 0x20", func(x uint64) uint64 { return Below(x, 0x20) }, func(c byte) bool { return c < 0x20 }},
		{"Below 0x80", func(x uint64) uint64 { return Below(x, 0x80) }, func(c byte) bool { return c < 0x80 }},
		{"NonASCII", NonASCII, func(c byte) bool { return c >= 0x80 }},
		{"JSON string end", func(x uint64) uint64 {
			return NonASCII(x) | Below(x, 0x20) | Zero(x^Lo*'"') | Zero(x^Lo*'\\')
		}, func(c byte) bool { return c >= 0x80 || c < 0x20 || c == '"' || c == '\\' }},
	}
	var w [8]byte
	for range 200_000 {
		for i := range w {
			if rng.IntN(2) == 0 {
				w[i] = special[rng.IntN(len(special))]
			} else {
				w[i] = byte(rng.Uint32())
			}
		}
		x := binary.LittleEndian.Uint64(w[:])
		if Load(string(w[:]), 0) != x {
			t.Fatalf("Load(%q) = %#x, want %#x", w, Load(string(w[:]), 0), x)
		}
		for _, tc := range tests {
			want := -1
			for i, c := range w {
				if tc.is(c) {
					want = i
					break
				}
			}
			got := -1 // nothing marked
			if m := tc.mark(x); m != 0 {
				got = First(m)
			}
			if got != want {
				t.Fatalf("%s(%q) marks byte %d first, want %d (-1: none)", tc.name, w, got, want)
			}
		}
	}
}
