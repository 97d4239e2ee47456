package quota

import (
	"testing"
	"time"
)

func TestShadowed(t *testing.T) {
	for _, tc := range []struct {
		in, want Decision
		refuse   bool
	}{
		{Decision{Status: OK, Remaining: 3}, Decision{Status: OK, Remaining: 3, Shadow: true, ShadowStatus: OK}, false},
		{Decision{Status: OKWait, Wait: time.Second}, Decision{Status: OK, Shadow: true, ShadowStatus: OKWait}, true},
		{Decision{Status: Rejected, Reason: ReasonTimeout, RetryAfter: time.Second, Limit: 5},
			Decision{Status: OK, Reason: ReasonTimeout, Limit: 5, Shadow: true, ShadowStatus: Rejected}, true},
		// Bad input stays refused.
		{Decision{Status: Rejected, Reason: ReasonBadRequest}, Decision{Status: Rejected, Reason: ReasonBadRequest}, false},
	} {
		got := tc.in.Shadowed()
		if got != tc.want || got.WouldRefuse() != tc.refuse {
			t.Errorf("%+v.Shadowed() = %+v (would refuse %v), want %+v (%v)", tc.in, got, got.WouldRefuse(), tc.want, tc.refuse)
		}
	}
}
