package httplimit

import "testing"

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{
		"api":        `"api"`,
		`a"b\c`:      `"a\"b\\c"`,
		"tenant/ü":   `"tenant/__"`,
		"x\x7fy\x01": `"x_y_"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}
