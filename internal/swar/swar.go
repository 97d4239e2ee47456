// Package swar tests eight bytes at a time, in a uint64 whose lowest byte
// is the first: the hand-written JSON and subject scanners of the lease,
// quota and domain codecs find the first byte that ends a run of plain
// ones this way. Each test sets the high bit of the first byte it is
// looking for, and perhaps of bytes after it, but of none before it, so
// First of any union of tests is the first byte any of them is after.
package swar

import "math/bits"

const (
	// Lo has every byte's lowest bit set: Lo*c repeats byte c.
	Lo = 0x0101010101010101
	// Hi has every byte's highest bit set.
	Hi = 0x8080808080808080
)

// Zero marks x's zero bytes: Zero(x ^ Lo*c) marks the bytes equal to c.
func Zero(x uint64) uint64 { return (x - Lo) &^ x & Hi }

// Below marks the bytes of x less than n (n at most 0x80).
func Below(x uint64, n byte) uint64 { return (x - Lo*uint64(n)) &^ x & Hi }

// NonASCII marks the bytes of x from 0x80.
func NonASCII(x uint64) uint64 { return x & Hi }

// First is the position (0–7) of the first byte m marks; m must be
// nonzero.
func First(m uint64) int { return bits.TrailingZeros64(m) / 8 }

// Load is the eight bytes of s from i as a word, s[i] lowest.
func Load(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
