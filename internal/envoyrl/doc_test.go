package envoyrl_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot/allot/internal/envoyrl"
)

// TestDocExample keeps the example of docs/envoy.md valid and saying what
// the page says it does.
func TestDocExample(t *testing.T) {
	page, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/envoy.md has no yaml example")
	}
	lim := limiter(t, example, envoyrl.Options{})
	at := int64(1_800_000_000) // a multiple of 300 s
	resp := decide(t, lim, at, req("edge",
		d("client", "x"), d("client", "batch"), d("path", "/api/a"), d("path", "/api/b"),
		d("path", "/healthz"), d("tenant", "t", "method", "POST")))
	st := resp.GetStatuses()
	if st[0].GetCurrentLimit().GetRequestsPerUnit() != 100 || st[0].GetLimitRemaining() != 99 {
		t.Errorf("per client: %v", st[0])
	}
	if st[1].GetCurrentLimit().GetName() != "batch" || st[1].GetCurrentLimit().GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("batch: %v", st[1])
	}
	if st[2].GetLimitRemaining() != 49 || st[3].GetLimitRemaining() != 48 {
		t.Errorf("shared /api/*: %v, %v", st[2], st[3])
	}
	if st[4].GetLimitRemaining() != 4294967295 || st[4].GetCurrentLimit() != nil {
		t.Errorf("unlimited: %v", st[4])
	}
	if st[5].GetCurrentLimit().GetUnitMultiplier().GetValue() != 5 || st[5].GetDurationUntilReset().GetSeconds() != 300 {
		t.Errorf("tenant posts: %v", st[5])
	}
	for i := 0; i < 25; i++ {
		resp = decide(t, lim, at+1, req("edge", d("tenant", "t", "method", "POST")))
	}
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Errorf("shadow mode over its limit: %v", resp)
	}
	if _, err := lim.ShouldRateLimit(context.Background(), time.Unix(at, 0), req("", d("client", "x"))); err == nil {
		t.Error("a request without domain was answered")
	}
}
