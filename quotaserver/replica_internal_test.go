package quotaserver

import (
	"testing"
	"time"

	"github.com/allot/allot/internal/quota"
)

// TestLongestWait: a new leader's buckets start drained past its
// predecessor's last OK_WAIT, which is at most the longest wait_timeout
// (for a token bucket also at most its max_debt) of any bucket.
func TestLongestWait(t *testing.T) {
	tb := &quota.Spec{Algorithm: quota.TokenBucket, WaitTimeout: 5 * time.Second, MaxDebt: 2 * time.Second}
	win := &quota.Spec{Algorithm: quota.FixedWindow, WaitTimeout: 3 * time.Second}
	cfg := &quota.Config{Namespaces: map[string]*quota.Namespace{
		"a": {Name: "a", Default: tb},
		"b": {Name: "b", Buckets: map[string]*quota.Spec{"x": win}},
	}}
	if got := longestWait(cfg); got != 3*time.Second {
		t.Fatalf("longest wait %v, want 3s (the window's timeout; the token bucket's debt caps it at 2s)", got)
	}
	cfg.Namespaces["c"] = &quota.Namespace{Name: "c", Dynamic: &quota.Spec{Algorithm: quota.LeakyBucket, WaitTimeout: 7 * time.Second}}
	if got := longestWait(cfg); got != 7*time.Second {
		t.Fatalf("longest wait %v, want 7s from the dynamic template", got)
	}
	if got := longestWait(nil); got != 0 {
		t.Fatalf("longest wait of no configuration: %v", got)
	}
}
