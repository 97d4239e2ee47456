package wire

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"testing"
)

// plainByte is unplain's test for one byte.
func plainByte(c byte) bool { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' }

// TestUnplain puts every byte value at every position of words of plain
// bytes and of random bytes, and compares the first byte unplain marks
// with a check of each byte.
func TestUnplain(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var word [8]byte
	for n := range 20000 {
		for k := range word {
			if n%2 == 0 {
				word[k] = byte(0x20 + rng.IntN(0x5f))
			} else {
				word[k] = byte(rng.Uint32())
			}
		}
		for pos := range word {
			for c := range 256 {
				w := word
				w[pos] = byte(c)
				want := len(w)
				for k := len(w) - 1; k >= 0; k-- {
					if !plainByte(w[k]) {
						want = k
					}
				}
				got := bits.TrailingZeros64(unplain(binary.LittleEndian.Uint64(w[:]))) / 8
				if got != want {
					t.Fatalf("unplain(%q) marks byte %d first, want %d", w, got, want)
				}
			}
		}
	}
}

// TestPlainString reads strings whose one unplain byte sits at every
// position, across the eight-byte steps.
func TestPlainString(t *testing.T) {
	for n := range 40 {
		plain := make([]byte, n)
		for k := range plain {
			plain[k] = byte('a' + k%26)
		}
		data := []byte(`"` + string(plain) + `",`)
		if v, j, ok := plainString(data, 0); !ok || string(v) != string(plain) || j != n+2 {
			t.Fatalf("plainString(%q) = %q, %d, %v", data, v, j, ok)
		}
		if _, _, ok := plainString(data[:n+1], 0); ok {
			t.Fatalf("plainString(%q) read an unterminated string", data[:n+1])
		}
		for pos := range n {
			for _, c := range []byte{'\\', 0x1f, 0x7f, 0x80, 0xff, 0} {
				bad := append([]byte(nil), data...)
				bad[1+pos] = c
				if v, _, ok := plainString(bad, 0); ok {
					t.Fatalf("plainString(%q) = %q, want not plain", bad, v)
				}
			}
			quoted := append([]byte(nil), data...)
			quoted[1+pos] = '"'
			if v, j, ok := plainString(quoted, 0); !ok || string(v) != string(plain[:pos]) || j != pos+2 {
				t.Fatalf("plainString(%q) = %q, %d, %v", quoted, v, j, ok)
			}
		}
	}
}

// TestPlainDecimal compares plainDecimal with strconv.ParseFloat on the
// numbers either side of its exact path (15 digits) and on those whose
// division rounds.
func TestPlainDecimal(t *testing.T) {
	for _, s := range []string{
		"0", "0.0", "0.000000000000000", "10", "33.5", "0.1", "0.3", "2.675", "1.15", "9.95",
		"123456789012345", "999999999999999", "99999999999999.9", "0.999999999999999",
		"1234567890123456", "9007199254740993", "0.1234567890123456", "12345678901234567890.123",
		"0.000000000000001", "0.0000000000000001", "1.7976931348623157", "4503599627370497.5",
	} {
		checkPlainDecimal(t, []byte(s))
	}
}

// FuzzPlainDecimal compares plainDecimal with strconv.ParseFloat on
// every number it accepts.
func FuzzPlainDecimal(f *testing.F) {
	for _, s := range []string{"10", "33.5", "0.1", "123456789012345", "1234567890123456", "0.000000000000001"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkPlainDecimal(t, data) })
}

func checkPlainDecimal(t *testing.T, data []byte) {
	t.Helper()
	v, j, ok := plainDecimal(data, 0)
	if !ok {
		return
	}
	want, err := strconv.ParseFloat(string(data[:j]), 64)
	if err != nil || v != want {
		t.Fatalf("plainDecimal(%q) = %v (%d bytes), strconv.ParseFloat = %v, %v", data, v, j, want, err)
	}
}
