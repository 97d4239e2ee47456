package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/quotaserver"
)

// TestUpShadow: `allot up --shadow` serves every resource and quota
// bucket in shadow mode: the lease is granted as usual and the reply says
// shadow; a quota take is answered OK, saying what the bucket decided.
func TestUpShadow(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--shadow", "--log-level", "info")
	up.printed(t, regexp.MustCompile("shadow mode"), "a mention of shadow mode")
	code, out := runCtx(context.Background(), "get", "--nats", up.url, "mysql/main", "--wants", "600", "--client", "c1")
	if code != 0 || !strings.Contains(out, `"shadow": true`) || !strings.Contains(out, `"capacity": 500`) {
		t.Errorf("get under --shadow: exit %d, %s", code, out)
	}
	// The quota service is shadowed too: a take no bucket answers is OK.
	nc, err := nats.Connect(up.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var reply []byte
	poll.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		m, err := nc.Request(quotaserver.TakeSubject("root"), []byte(`{"bucket":"nope:x"}`), time.Second)
		if err != nil {
			return fmt.Errorf("no quota answer: %w", err)
		}
		reply = m.Data
		return nil
	})
	if s := string(reply); !strings.Contains(s, `"status":"OK"`) || !strings.Contains(s, `"shadow":true`) || !strings.Contains(s, `"shadow_status":"REJECTED"`) {
		t.Errorf("quota take under --shadow: %s", s)
	}
	up.wait(t)
}
