package agent

import (
	"strings"
	"testing"
	"time"
)

// TestServiceErrorText: a ServiceError is any allot service's error reply
// (the coordinator's, or the quota or domain service's), and its text
// says a service answered, with the code, the description and any wait.
// Before, it said "coordinator error" whichever service answered: a
// domain reserve's 404 read "coordinator error 404".
func TestServiceErrorText(t *testing.T) {
	for _, tc := range []struct {
		e    ServiceError
		want string
	}{
		{ServiceError{Code: 404, Description: "not configured"}, "service error 404: not configured"},
		{ServiceError{Code: 503, Description: "overloaded", RetryAfter: 2 * time.Second}, "service error 503: overloaded (retry after 2s)"},
	} {
		got := tc.e.Error()
		if got != tc.want || strings.Contains(got, "coordinator") {
			t.Errorf("%+v.Error() = %q, want %q", tc.e, got, tc.want)
		}
	}
}
