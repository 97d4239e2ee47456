package intake_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/intake"
)

func TestWithDefaults(t *testing.T) {
	for _, c := range []struct {
		name string
		in   intake.Limits
		want intake.Limits
		err  string
	}{
		{"zero", intake.Limits{}, intake.Limits{MaxInFlight: intake.DefaultMaxInFlight, Reserve: intake.DefaultMaxInFlight / 4,
			MaxAge: intake.DefaultMaxAge, RetryAfter: intake.DefaultRetryAfter,
			PendingMsgs: intake.DefaultPendingMsgs, PendingBytes: intake.DefaultPendingBytes}, ""},
		{"tenant rate", intake.Limits{MaxInFlight: 100, TenantRate: 10}, intake.Limits{MaxInFlight: 100, Reserve: 25,
			MaxAge: intake.DefaultMaxAge, RetryAfter: intake.DefaultRetryAfter, TenantRate: 10, TenantBurst: 20,
			PendingMsgs: intake.DefaultPendingMsgs, PendingBytes: intake.DefaultPendingBytes}, ""},
		{"set", intake.Limits{MaxInFlight: 8, Reserve: 2, MaxAge: time.Second, RetryAfter: time.Second, PendingMsgs: 5, PendingBytes: 6},
			intake.Limits{MaxInFlight: 8, Reserve: 2, MaxAge: time.Second, RetryAfter: time.Second, PendingMsgs: 5, PendingBytes: 6}, ""},
		{"negative", intake.Limits{MaxAge: -1}, intake.Limits{}, "negative"},
		{"reserve too big", intake.Limits{MaxInFlight: 4, Reserve: 4}, intake.Limits{}, "reserve 4 must be below"},
		// NaN passes every comparison but refuses every tenant request
		// (a limiter of burst 0 whose delay overflows the retry_after).
		{"tenant rate NaN", intake.Limits{TenantRate: math.NaN()}, intake.Limits{}, "tenant rate NaN"},
		{"tenant rate infinite", intake.Limits{TenantRate: math.Inf(1)}, intake.Limits{}, "tenant rate +Inf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.in.WithDefaults()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || c.in.Validate() == nil {
					t.Fatalf("%+v: error %v, want one saying %q", c.in, err, c.err)
				}
				return
			}
			if err != nil || got != c.want || c.in.Validate() != nil {
				t.Fatalf("%+v: %+v, %v; want %+v", c.in, got, err, c.want)
			}
		})
	}
}
