package main

import (
	"context"
	"strings"
	"testing"
)

// TestUpShadow: `allot up --shadow` serves every resource in shadow mode:
// the lease is granted as usual and the reply says shadow.
func TestUpShadow(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--shadow", "--log-level", "info")
	if !strings.Contains(up.out.String(), "shadow mode") {
		t.Errorf("startup log does not mention shadow mode:\n%s", up.out.String())
	}
	code, out := runCtx(context.Background(), "get", "--nats", up.url, "mysql/main", "--wants", "600", "--client", "c1")
	if code != 0 || !strings.Contains(out, `"shadow": true`) || !strings.Contains(out, `"capacity": 500`) {
		t.Errorf("get under --shadow: exit %d, %s", code, out)
	}
	up.wait(t)
}
