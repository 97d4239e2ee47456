package intake

import (
	"testing"
	"time"

	"github.com/allot/allot/internal/leader"
)

// TestDocumentedDefaults keeps the defaults Limits documents those the
// servers fill in. (That Limits and Stats have the intake's own fields is
// checked by the compiler: the servers convert one to the other.)
func TestDocumentedDefaults(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"MaxInFlight", leader.DefaultMaxInFlight, 1024},
		{"MaxAge", leader.DefaultMaxAge, 2 * time.Second},
		{"RetryAfter", leader.DefaultRetryAfter, 250 * time.Millisecond},
		{"PendingMsgs", leader.DefaultPendingMsgs, 1 << 20},
		{"PendingBytes", leader.DefaultPendingBytes, 256 << 20},
	} {
		if c.got != c.want {
			t.Errorf("the servers' default %s is %v; Limits documents %v", c.name, c.got, c.want)
		}
	}
}
