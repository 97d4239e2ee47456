package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
)

const cliShop = `resources:
  api:
    kind: rate
    hard_limit: 100
    tiers:
      - {limit: 10, window: 5s, active: 3s}
  sandboxes:
    kind: copies
    domain_limit: 5
    global_limit: 4
    groups:
      - {name: free, limit: 2, domains: [a, b]}
`

// TestConfigDomainsCLI drives `allot config` through a domains key:
// validate (file name and -name), put (refusing an invalid document),
// get (stored and normalized), list with an invalid revision stored
// behind the CLI's back.
func TestConfigDomainsCLI(t *testing.T) {
	s := natstest.Server(t)
	url := s.ClientURL()
	file := filepath.Join(t.TempDir(), "domains.shop.yaml")
	if err := os.WriteFile(file, []byte(cliShop), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(wantOK bool, want []string, stdin string, args ...string) {
		t.Helper()
		code, out, errs := runCLI(t, stdin, args...)
		for _, w := range want {
			if (code == 0) != wantOK || !strings.Contains(out+errs, w) {
				t.Fatalf("allot %s: exit %d, want success %v and %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantOK, w, out, errs)
			}
		}
	}
	// Normalized: window 5s shortened to the active 3s; the domain limit
	// lowered to the global limit.
	run(true, []string{`as domains namespace "shop"`, `"window": "3s"`, `"domain_limit": 4`,
		"note: resources.api.tiers[0].window: 5s shortened to the active time 3s",
		"note: resources.sandboxes.domain_limit: 5 lowered to the global limit 4"}, "", "config", "validate", file)
	run(true, []string{`as domains namespace "x"`}, cliShop, "config", "validate", "--name", "domains.x", "-")
	run(false, []string{"resources.api.tiers[0].window: \"5 s\" is not a duration"}, strings.Replace(cliShop, "5s", "5 s", 1), "config", "validate", "--name", "domains.shop", "-")

	run(true, []string{"stored domains.shop revision 1 (domains namespace: 1 rate-limited, 1 copy-limited resources)"}, "", "config", "put", "--create-bucket", "--nats", url, "domains.shop", file)
	run(false, []string{`refusing invalid domains namespace shop: resources.api.kind: "hits" is not a kind`}, `{"resources": {"api": {"kind": "hits"}}}`, "config", "put", "--nats", url, "domains.shop", "-")
	run(false, []string{`namespace name "a.b"`}, `{}`, "config", "put", "--nats", url, "domains.a.b", "-")
	run(true, []string{"hard_limit: 100"}, "", "config", "get", "--nats", url, "domains.shop")
	run(true, []string{`"hard_limit": 100`, `"window": "3s"`}, "", "config", "get", "--normalized", "--nats", url, "domains.shop")
	run(true, []string{"DOMAINS NAMESPACE", "domains.shop", "1 rate-limited, 1 copy-limited resources", "ok"}, "", "config", "list", "--nats", url)

	js, _ := jetstream.New(natstest.Conn(t, s))
	kv, err := js.KeyValue(testCtx(t), configkv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), config.DomainsKey("shop"), []byte(`{"resources": {"api": {"kind": "rate", "hard_limit": -5}}}`)); err != nil {
		t.Fatal(err)
	}
	run(true, []string{"domains.shop", "INVALID: resources.api.hard_limit: -5 is outside", "revision 1 serves"}, "", "config", "list", "--nats", url)
}
