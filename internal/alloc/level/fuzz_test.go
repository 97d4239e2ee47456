package level

import (
	"encoding/binary"
	"testing"
)

// bytesSource draws a history's choices from the fuzzer's bytes, zeros
// once they run out.
type bytesSource struct{ b []byte }

func (s *bytesSource) next16() uint16 {
	var buf [2]byte
	n := copy(buf[:], s.b)
	s.b = s.b[n:]
	return binary.LittleEndian.Uint16(buf[:])
}

func (s *bytesSource) IntN(n int) int   { return int(s.next16()) % n }
func (s *bytesSource) Float64() float64 { return float64(s.next16()) / (1 << 16) }

// FuzzHistory runs a history chosen by the fuzzer against the model: any
// sequence of changes gives alloc's shares and the model's sums.
func FuzzHistory(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 0, 10, 0, 7, 0, 8, 0})
	f.Add([]byte{2, 0, 3, 0, 0, 0, 5, 0, 0, 0, 0, 0, 6, 1, 9, 0, 10, 0, 4, 0, 1, 0, 11, 0})
	f.Add([]byte("a longer history of bytes that picks every kind of step now and then"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		k := kinds[int(data[0])%len(kinds)]
		src := &bytesSource{b: data[1:]}
		if err := history(src, k.kind, k.tenanted, min(len(data)/2, 100)); err != nil {
			t.Fatal(err)
		}
	})
}
