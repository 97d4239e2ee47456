package rpc

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/wire"
)

// TestRetryAfter: a service's advice is used up to a minute; none, a bad
// one and one so long that it overflows a Duration are bounded, never a
// negative wait.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"x", 0},
		{"-5", 0},
		{"0", 0},
		{"250", 250 * time.Millisecond},
		{"60000", time.Minute},
		{"3600000", time.Minute},
		{"10000000000000", time.Minute},
		{strconv.FormatInt(1<<63-1, 10), time.Minute},
	} {
		m := nats.NewMsg("x")
		m.Header.Set(wire.HeaderRetryAfter, tc.header)
		if got := RetryAfter(m); got != tc.want {
			t.Errorf("RetryAfter(%q) = %v; want %v", tc.header, got, tc.want)
		}
	}
}
