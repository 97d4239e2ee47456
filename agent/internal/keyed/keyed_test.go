package keyed

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/limittest"
	"github.com/allot/allot/internal/wire"
)

// TestID: whatever a request carries, ID makes a valid resource id.
func TestID(t *testing.T) {
	for _, tc := range []struct{ prefix, v, want string }{
		{"t/", "acme", "t/acme"},
		{"t/", "", "t/-"},
		{"t/", "a b\tc\x00d", "t/a_b_c_d"},
		{"t/", "\xff\xfe", "t/__"},
		{"t/", "ü", "t/ü"},
		{"t/", strings.Repeat("x", 300), "t/" + strings.Repeat("x", wire.MaxIDLen-2)},
		{"t/", strings.Repeat("é", 200), "t/" + strings.Repeat("é", (wire.MaxIDLen-2)/2)},
	} {
		got := ID(tc.prefix, tc.v)
		if got != tc.want {
			t.Errorf("ID(%q, %q) = %q, want %q", tc.prefix, tc.v, got, tc.want)
		}
		if err := wire.ValidateID("id", got); err != nil {
			t.Errorf("ID(%q, %q): %v", tc.prefix, tc.v, err)
		}
	}
}

// TestDescribe: a decision's window, quota and wait are sound for any
// lease, a lease of almost nothing (a floating-point remainder of a
// share) included, whose window and wait once overflowed to negative
// numbers.
func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		lim, tokens float64
		window      int64
		quota       int64
		wait        time.Duration
	}{
		{10, 5, 1, 10, 0},
		{10, 0.5, 1, 10, 50 * time.Millisecond},
		{0.25, 0, 4, 1, 4 * time.Second},
		{0, 0, 1, 0, 2 * time.Second},
		{1.0 / (1 << 30), 0, 1 << 30, 1, (1 << 30) * time.Second},
		{1e-10, 0, 1, 0, 2 * time.Second},
		{1e-300, 0.5, 1, 0, 2 * time.Second},
		{math.SmallestNonzeroFloat64, 0, 1, 0, 2 * time.Second},
		{math.NaN(), 0, 1, 0, 2 * time.Second},
		// Tokens reserved ahead (Tokens is negative) on a lease just
		// above MinRate: the wait is longer than a Duration holds.
		{MinRate, -4, 1 << 31, 1, math.MaxInt64},
	} {
		d := describe(tc.lim, tc.tokens, false, 2*time.Second)
		if d.Window != tc.window || d.Quota != tc.quota || d.RetryAfter != tc.wait || !d.Limited {
			t.Errorf("describe(%g, %g) = %+v; want window %d, quota %d, wait %v", tc.lim, tc.tokens, d, tc.window, tc.quota, tc.wait)
		}
		if d.Window < 1 || d.Quota < 0 || d.RetryAfter < 0 || Seconds(d.RetryAfter) < 1 {
			t.Errorf("describe(%g, %g) = %+v: out of range", tc.lim, tc.tokens, d)
		}
	}
}

// TestRenew: a closed limiter is replaced under the key that holds it,
// the overflow's for an id beyond maxKeys (no resource for the id
// itself); an open one is kept; a closed agent gives none.
func TestRenew(t *testing.T) {
	a := limittest.Agent(t)
	s, err := New(a, 1, "of", nil)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.Limiter("first")
	over, _ := s.Limiter("beyond")
	if l, err := s.Renew("first", first); l != first || err != nil {
		t.Fatalf("Renew of an open limiter: %p %v, want it back", l, err)
	}
	over.Close()
	renewed, err := s.Renew("beyond", over)
	if err != nil || renewed == over || Closed(renewed) {
		t.Fatalf("Renew of the closed overflow limiter: %v %v", renewed, err)
	}
	if l, _ := s.Limiter("beyond"); l != renewed {
		t.Error("the overflow's key does not get the renewed limiter")
	}
	if l, _ := s.Renew("beyond", over); l != renewed {
		t.Error("a second Renew of the same closed limiter made another")
	}
	var ids []string
	for _, st := range a.Status() {
		ids = append(ids, st.ResourceID)
	}
	if strings.Join(ids, ",") != "first,of" {
		t.Errorf("resources %q, want first and of", ids)
	}
	a.Close()
	if _, err := s.Renew("first", first); !errors.Is(err, agent.ErrClosed) {
		t.Errorf("Renew after the agent closed: %v, want ErrClosed", err)
	}
}
