package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/poll"
)

// TestUpServesDomainLimits: `allot up --quota-partitions 2` maps the
// domain subjects onto two partitions; a namespace put with `allot config
// put domains.app` is served on both of its resources, with holds, a
// transfer and a seize, through plain JSON requests as `nats req` sends
// them.
func TestUpServesDomainLimits(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--quota-partitions", "2", "--hold-ttl", "2s")
	up.printed(t, regexp.MustCompile(regexp.QuoteMeta("domain limits: allot.root.domain.OP.NAMESPACE.RESOURCE")), "the domain subjects")
	nc, err := nats.Connect(up.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const cfg = `{"resources": {
	  "search": {"kind": "rate", "hard_limit": 2, "tiers": [{"limit": 2, "window": "1s", "active": "1m", "cooldown": "1m"}]},
	  "sandbox": {"kind": "copies", "domain_limit": 3, "global_limit": 4}}}`
	if code, out, errs := runCLI(t, cfg, "config", "put", "--nats", up.url, "domains.app", "-"); code != 0 {
		t.Fatalf("config put domains.app: exit %d: %s%s", code, out, errs)
	}
	// ask retries until a leader answers without an error: partitions
	// elect their leaders, and the configuration arrives, after `up`. A
	// partition not serving yet is no responders at once; a serving one
	// may take over a second to answer under -race on a loaded machine,
	// and a reserve retried after it was granted would be granted twice.
	ask := func(op, res, body string, out any) {
		t.Helper()
		poll.For(t, 15*time.Second, 50*time.Millisecond, func() error {
			m, err := nc.Request(domainwire.Subject("root", op, "app", res), []byte(body), 5*time.Second)
			if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
				if err := json.Unmarshal(m.Data, out); err != nil {
					t.Fatalf("%s reply %s: %v", op, m.Data, err)
				}
				return nil
			}
			return fmt.Errorf("%s %s %s: no answer (last %v %v)", op, res, body, err, m)
		})
	}
	var r domainwire.RateReply
	ask(domainwire.OpRequest, "search", `{"domain":"acme","copies":5,"min_copies":1}`, &r)
	if r.Granted != 2 || r.HardLimit != 2 {
		t.Errorf("request 5 min 1 against a hard limit of 2: %+v", r)
	}
	var h domainwire.ReserveReply
	ask(domainwire.OpReserve, "sandbox", `{"domain":"acme","copies":5,"min_copies":1,"client_id":"w1"}`, &h)
	if h.Granted != 3 || h.HoldID == "" || h.TTLMillis != 2000 {
		t.Fatalf("reserve: %+v", h)
	}
	var tr domainwire.TransferReply
	ask(domainwire.OpTransfer, "sandbox", `{"client_id":"w1","hold_id":"`+h.HoldID+`","copies":2}`, &tr)
	var sz domainwire.SeizeReply
	ask(domainwire.OpSeize, "sandbox", `{"client_id":"w2","transfer_id":"`+tr.TransferID+`"}`, &sz)
	if tr.Remaining != 1 || sz.Copies != 2 || sz.Domain != "acme" {
		t.Errorf("transfer %+v, seize %+v", tr, sz)
	}
	var other domainwire.ReserveReply
	ask(domainwire.OpReserve, "sandbox", `{"domain":"zeta","copies":4,"min_copies":1,"client_id":"w3"}`, &other)
	if other.Granted != 1 || other.GlobalHolds != 4 {
		t.Errorf("the global limit of 4 leaves 1: %+v", other)
	}
	// allot status lists both domain partitions, the one owning
	// app:sandbox with its 3 holds and 4 copies.
	rowRE := regexp.MustCompile(`(?m)^root\s+([01])\s+\S+.*\s(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$`)
	var rows [][]string
	out := statusUntil(t, func(code int, out string) string {
		_, domains, ok := strings.Cut(out, "DOMAIN LIMITS")
		rows = rowRE.FindAllStringSubmatch(domains, -1)
		if code != 0 || !ok || len(rows) != 2 {
			return "status does not list both domain partitions:\n" + out
		}
		return ""
	}, "--nats", up.url)
	holds, copies := 0, 0
	for _, r := range rows {
		h, _ := strconv.Atoi(r[2])
		c, _ := strconv.Atoi(r[3])
		holds, copies = holds+h, copies+c
	}
	if holds != 3 || copies != 4 {
		t.Errorf("status shows %d holds of %d copies, want 3 of 4:\n%s", holds, copies, out)
	}
	// So do the metrics, per partition.
	fams := scrapeMetrics(t, up.opsURL(t))
	var mholds, mcopies, reserves float64
	for _, p := range []string{"0", "1"} {
		h, _ := metricValue(fams, "allot_domain_holds", map[string]string{"node": "root", "partition": p})
		c, _ := metricValue(fams, "allot_domain_copies_held", map[string]string{"node": "root", "partition": p})
		r, _ := metricValue(fams, "allot_domain_reserves_total", map[string]string{"node": "root", "partition": p})
		mholds, mcopies, reserves = mholds+h, mcopies+c, reserves+r
	}
	if mholds != 3 || mcopies != 4 || reserves != 2 {
		t.Errorf("metrics: %v holds of %v copies, %v reserves; want 3 of 4, 2", mholds, mcopies, reserves)
	}
}
