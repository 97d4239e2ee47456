package wire

import "fmt"

// InlineDecodeBytes: requests up to this size are decoded on the
// handler's goroutine; larger ones on a separate lane.
const InlineDecodeBytes = 16 << 10

// CheckSize is a placeholder until the wire limits land.
func CheckSize(enc Encoding, n int) error {
	if n > 1<<20 {
		return fmt.Errorf("request of %d bytes is too large", n)
	}
	return nil
}
