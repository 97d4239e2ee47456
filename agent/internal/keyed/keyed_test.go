package keyed

import (
	"strings"
	"testing"

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
