package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// The tests in this file run the documentation's `nats` commands with the
// real nats CLI against `allot up`, as a new user would, and check that
// each command they run is written in the document that shows it.

// docHas fails the test unless the document file (relative to the
// repository root) contains every line.
func docHas(t *testing.T, file string, lines ...string) {
	t.Helper()
	data, err := os.ReadFile("../../" + file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if !strings.Contains(string(data), l) {
			t.Errorf("%s does not show %q", file, l)
		}
	}
}

// cliWait runs the nats CLI until its output satisfies ok, and returns it.
func cliWait(t *testing.T, cli *natstest.NatsCLI, what string, ok func(out string) bool, args ...string) string {
	t.Helper()
	var out string
	poll.Until(t, 20*time.Second, what, func() bool {
		var err error
		out, _, err = cli.Run(args...)
		return err == nil && ok(out)
	})
	return out
}

// TestNatsCLIConfigVerdicts: a put with the nats CLI of a key allot does
// not read, and of a template with two problems, is answered by a
// verdict the nats CLI reads from allot_state (docs/configuration.md),
// naming the key meant and every problem; `allot config status` says
// the same.
func TestNatsCLIConfigVerdicts(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	cli := natstest.CLI(t, up.url)
	const typoDoc = `{"identifier_glob":"db","capacity":5}`
	const badDoc = `{"identifier_glob":"db","capacity":-5,"algorithm":{"kind":"FAIR_SHAER"}}`
	docHas(t, "docs/configuration.md",
		"nats kv put allot_config tempaltes.typo '"+typoDoc+"'",
		"nats kv get allot_state root.config.tempaltes.typo --raw",
		"nats kv put allot_config templates.db '"+badDoc+"'",
		"nats kv get allot_state root.config.templates.db --raw",
		"nats kv watch allot_state 'root.config.>'")

	verdict := func(key string, check func(configkv.Verdict) bool) configkv.Verdict {
		t.Helper()
		var v configkv.Verdict
		cliWait(t, cli, "the verdict on "+key, func(out string) bool {
			return json.Unmarshal([]byte(out), &v) == nil && check(v)
		}, "kv", "get", "allot_state", "root.config."+key, "--raw")
		return v
	}
	cli.MustRun("kv", "put", "allot_config", "tempaltes.typo", typoDoc)
	v := verdict("tempaltes.typo", func(v configkv.Verdict) bool { return v.Key == "tempaltes.typo" })
	if v.OK || len(v.Errors) != 1 || !strings.Contains(v.Errors[0], `did you mean "templates.typo"?`) {
		t.Errorf("verdict on tempaltes.typo: %+v", v)
	}
	// Word for word as the document shows it, but for the revision.
	raw := cli.MustRun("kv", "get", "allot_state", "root.config.tempaltes.typo", "--raw")
	raw = strings.Replace(strings.TrimSpace(raw), fmt.Sprintf(`"revision":%d,`, v.Revision), `"revision":5,`, 1)
	docHas(t, "docs/configuration.md", "# "+raw+"\n")
	// envoy.<domain> is one of the keys allot reads: the verdict on a
	// misspelt one names it, and the key meant.
	cli.MustRun("kv", "put", "allot_config", "envoi.edge", "domain: edge\ndescriptors: []\n")
	v = verdict("envoi.edge", func(v configkv.Verdict) bool { return v.Key == "envoi.edge" })
	if v.OK || len(v.Errors) != 1 || !strings.Contains(v.Errors[0], "envoy.<domain>") || !strings.Contains(v.Errors[0], `did you mean "envoy.edge"?`) {
		t.Errorf("verdict on envoi.edge: %+v", v)
	}
	cli.MustRun("kv", "put", "allot_config", "templates.db", badDoc)
	v = verdict("templates.db", func(v configkv.Verdict) bool { return v.Key == "templates.db" })
	if v.OK || len(v.Errors) != 2 || !strings.Contains(v.Errors[0], `"FAIR_SHAER"`) || v.Errors[1] != "capacity: -5 is negative" ||
		!strings.Contains(v.State, `refusing resources matching "db"`) {
		t.Errorf("verdict on templates.db: %+v", v)
	}
	// A seeded template's verdict says it is applied.
	verdict("templates.mysql-main", func(v configkv.Verdict) bool { return v.OK && v.State == "ok" })

	code, out := runCtx(testCtx(t), "config", "status", "--nats", up.url)
	for _, want := range []string{`ignored tempaltes.typo revision `, `did you mean "templates.typo"?`,
		"rejected templates.db revision", "2 problems: algorithm.kind", "capacity: -5 is negative"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("config status (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
}

// reportAck is a quota.report acknowledgement.
type reportAck struct {
	Accepted int    `json:"accepted"`
	Ignored  int    `json:"ignored"`
	Error    string `json:"error"`
}

// TestNatsCLIQuotaReport: subjects.md's quota.report commands, run by the
// nats CLI against `allot up`, answer as documented: the namespace is
// made first, a report charges its bucket, a batch with a malformed
// report counts one accepted and one ignored, and a report no bucket
// answers counts as one ignored (not two).
func TestNatsCLIQuotaReport(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	cli := natstest.CLI(t, up.url)
	const (
		ns     = `{"dynamic_bucket_template":{"size":1000,"fill_rate":1}}`
		one    = `{"bucket":"batch:job","tokens":120}`
		batch  = `[{"bucket":"batch:job","tokens":120},{"bucket":"bad-name","tokens":1}]`
		nobody = `{"bucket":"nons:x","tokens":1}`
	)
	docHas(t, "subjects.md",
		"nats kv put allot_config namespaces.batch '"+ns+"'",
		"nats pub allot.root.quota.report '"+one+"'",
		"nats req allot.root.quota.report '"+batch+"'",
		`{"accepted":1,"ignored":1,"error":"report 1: bucket \"bad-name\" is not of the form \"namespace:name\""}`,
		"nats req allot.root.quota.report '"+nobody+"'",
		`{"accepted":0,"ignored":1,"error":"report nons:x: no_bucket: no bucket answers it (its namespace has none for it, and there is no global default bucket)"}`)

	cli.MustRun("kv", "put", "allot_config", "namespaces.batch", ns)
	// Applied once the namespace is: a peek shows the bucket.
	cliWait(t, cli, "namespace batch applied", func(out string) bool {
		var r struct{ Matched string }
		return json.Unmarshal([]byte(out), &r) == nil && r.Matched == "batch:job"
	}, "req", "allot.root.quota.take", `{"bucket":"batch:job","tokens":0}`)
	cli.MustRun("pub", "allot.root.quota.report", one)
	ack := func(body string) reportAck {
		t.Helper()
		var a reportAck
		out := cli.MustRun("req", "allot.root.quota.report", body)
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("nats req allot.root.quota.report %s: %v: %s", body, err, out)
		}
		return a
	}
	if a := ack(batch); a != (reportAck{1, 1, `report 1: bucket "bad-name" is not of the form "namespace:name"`}) {
		t.Errorf("batch: %+v", a)
	}
	if a := ack(nobody); a != (reportAck{0, 1, "report nons:x: no_bucket: no bucket answers it (its namespace has none for it, and there is no global default bucket)"}) {
		t.Errorf("report no bucket answers: %+v", a)
	}
	// Both reports of 120 were charged (the bucket refills 1 a second).
	var peek struct {
		Remaining int `json:"remaining"`
	}
	out := cli.MustRun("req", "allot.root.quota.take", `{"bucket":"batch:job","tokens":0}`)
	if err := json.Unmarshal([]byte(out), &peek); err != nil || peek.Remaining > 1000-240+30 {
		t.Errorf("after reporting 240 of 1000: %s", out)
	}
}

// microStats is what `nats micro stats SERVICE --json` prints: one entry
// per instance.
type microStats []struct {
	Name      string `json:"name"`
	Endpoints []struct {
		Name        string          `json:"name"`
		Subject     string          `json:"subject"`
		NumRequests int             `json:"num_requests"`
		Data        json.RawMessage `json:"data"`
	} `json:"endpoints"`
}

// quotaData is the part of allot-quota's STATS data the tests read.
type quotaData struct {
	Takes     int `json:"takes"`
	Forwarded int `json:"forwarded"`
	Events    map[string]struct {
		Served     int `json:"served"`
		ServedWait int `json:"served_wait"`
	} `json:"events"`
}

// TestNatsCLIDiscovery: what subjects.md and the README say of replies
// and of the micro services holds with the real nats CLI: a reply's
// floor is not above its lease, the coordinator has the three endpoints
// listed, the services' data is in `nats micro info` and `nats micro
// stats --json` (not in the table), and the quota counters to read
// count every take.
func TestNatsCLIDiscovery(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	cli := natstest.CLI(t, up.url)
	const (
		subjectsGet = `{"client_id":"me","resource":[{"resource_id":"db","wants":10}]}`
		readmeGet   = `{"client_id":"me","resource":[{"resource_id":"mysql/main","wants":10}]}`
	)
	docHas(t, "subjects.md", "nats req allot.root.capacity.get '"+subjectsGet+"'", "nats micro info allot ",
		"nats micro stats allot --json", "`server_get_child` (subject\n`allot.<node>.server.get.*`", "nats micro stats allot-replica --json")
	docHas(t, "README.md", "nats req allot.root.capacity.get '"+readmeGet+"'", "nats micro stats allot --json")

	for _, body := range []string{subjectsGet, readmeGet} {
		var r struct {
			Response []struct {
				Gets struct {
					Capacity float64 `json:"capacity"`
				} `json:"gets"`
				SafeCapacity float64 `json:"safe_capacity"`
			} `json:"response"`
		}
		out := cli.MustRun("req", "allot.root.capacity.get", body)
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Response) != 1 {
			t.Fatalf("capacity.get %s: %v: %s", body, err, out)
		}
		if g := r.Response[0]; g.Gets.Capacity != 10 || g.SafeCapacity > g.Gets.Capacity {
			t.Errorf("capacity.get %s: lease %g, safe capacity %g: want a lease of 10 and a floor not above it", body, g.Gets.Capacity, g.SafeCapacity)
		}
	}
	// subjects.md's reply: a lease of 10 and a floor of 10 (half the
	// default template's fair share, 50, capped at the lease).
	docHas(t, "subjects.md", `"gets": {"capacity": 10, `, `"safe_capacity": 10,`)

	var info struct {
		Info struct {
			Endpoints []struct{ Name, Subject string } `json:"endpoints"`
		} `json:"info"`
	}
	if out := cli.MustRun("micro", "info", "allot", "--json"); json.Unmarshal([]byte(out), &info) != nil {
		t.Fatalf("micro info allot --json: %s", out)
	}
	want := []struct{ Name, Subject string }{{"capacity", "allot.root.capacity.*"}, {"server_get", "allot.root.server.get"}, {"server_get_child", "allot.root.server.get.*"}}
	if fmt.Sprint(info.Info.Endpoints) != fmt.Sprint(want) {
		t.Errorf("allot's endpoints: %v, want %v", info.Info.Endpoints, want)
	}
	if out := cli.MustRun("micro", "info", "allot"); !strings.Contains(out, "Endpoint Specific Statistics") || !strings.Contains(out, `"rounds"`) {
		t.Errorf("nats micro info allot shows no data:\n%s", out)
	}
	if out := cli.MustRun("micro", "stats", "allot"); strings.Contains(out, `"rounds"`) || !strings.Contains(out, "server_get_child") {
		t.Errorf("nats micro stats allot (the table): not as documented:\n%s", out)
	}
	var data struct {
		Node   string `json:"node"`
		Rounds *int   `json:"rounds"`
		Role   string `json:"role"`
	}
	var stats microStats
	if out := cli.MustRun("micro", "stats", "allot", "--json"); json.Unmarshal([]byte(out), &stats) != nil || len(stats) != 1 || len(stats[0].Endpoints) != 3 ||
		json.Unmarshal(stats[0].Endpoints[0].Data, &data) != nil || data.Node != "root" || data.Rounds == nil {
		t.Errorf("nats micro stats allot --json: %s", out)
	}
	var replica microStats
	if out := cli.MustRun("micro", "stats", "allot-replica", "--json"); json.Unmarshal([]byte(out), &replica) != nil || len(replica) != 1 ||
		json.Unmarshal(replica[0].Endpoints[0].Data, &data) != nil || data.Role != "leader" {
		t.Errorf("nats micro stats allot-replica --json: %s", out)
	}

	// Quota: 3 takes on the plain subject, 4 on the bucket's (as the agent
	// sends them): micro counts them per endpoint, the data counts 7.
	cli.MustRun("kv", "put", "allot_config", "namespaces.logins", `{"dynamic_bucket_template": {"size": 5, "fill_rate": 1, "wait_timeout": "2s"}}`)
	cliWait(t, cli, "namespace logins applied", func(out string) bool {
		var r struct{ Matched string }
		return json.Unmarshal([]byte(out), &r) == nil && r.Matched == "logins:peek"
	}, "req", "allot.root.quota.take", `{"bucket":"logins:peek","tokens":0}`)
	for range 3 {
		cli.MustRun("req", "allot.root.quota.take", `{"bucket":"logins:alice"}`)
	}
	for range 4 {
		cli.MustRun("req", "allot.root.quota.take.logins.bob", `{}`)
	}
	var qs microStats
	if out := cli.MustRun("micro", "stats", "allot-quota", "--json"); json.Unmarshal([]byte(out), &qs) != nil || len(qs) != 1 {
		t.Fatalf("nats micro stats allot-quota --json: %s", out)
	}
	perEndpoint := map[string]int{}
	var qdata quotaData
	for _, e := range qs[0].Endpoints {
		perEndpoint[e.Name] = e.NumRequests
		if err := json.Unmarshal(e.Data, &qdata); err != nil {
			t.Fatal(err)
		}
	}
	ev := qdata.Events["logins"]
	// The peeks are takes too (of 0 tokens), but not served events.
	if peeks := qdata.Takes - 7; perEndpoint["take"] != 3+peeks || perEndpoint["take_bucket"] != 4 || ev.Served+ev.ServedWait != 7 {
		t.Errorf("allot-quota: per endpoint %v, takes %d, logins events %+v: want take_bucket 4 and 7 served", perEndpoint, qdata.Takes, ev)
	}
	if qdata.Takes != perEndpoint["take"]+perEndpoint["take_bucket"] {
		t.Errorf("allot-quota: takes %d, but micro counted %v", qdata.Takes, perEndpoint)
	}
}

// TestNatsCLIQuotaCountersPartitioned: with several partitions a take on
// the plain subject is received twice (partition 0 passes it on to the
// owner), as subjects.md says, while the data's takes count it once.
func TestNatsCLIQuotaCountersPartitioned(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0", "--quota-partitions", "2")
	cli := natstest.CLI(t, up.url)
	cli.MustRun("kv", "put", "allot_config", "namespaces.logins", `{"dynamic_bucket_template": {"size": 5, "fill_rate": 1}}`)
	cliWait(t, cli, "namespace logins applied", func(out string) bool {
		var r struct{ Status string }
		return json.Unmarshal([]byte(out), &r) == nil && r.Status == "OK"
	}, "req", "allot.root.quota.take", `{"bucket":"logins:alice"}`)
	cli.MustRun("req", "allot.root.quota.take.logins.alice", `{}`)
	var qs microStats
	if out := cli.MustRun("micro", "stats", "allot-quota", "--json"); json.Unmarshal([]byte(out), &qs) != nil || len(qs) != 2 {
		t.Fatalf("nats micro stats allot-quota --json: %s", out)
	}
	var received, takes, forwarded int
	for _, inst := range qs {
		var data quotaData
		for _, e := range inst.Endpoints {
			received += e.NumRequests
			if err := json.Unmarshal(e.Data, &data); err != nil {
				t.Fatal(err)
			}
		}
		takes += data.Takes
		forwarded += data.Forwarded
	}
	// The plain takes (the last one answered OK, maybe after some with
	// no_bucket while the namespace was not yet applied) were each
	// received twice; the bucket subject's once.
	if takes < 2 || forwarded != takes-1 || received != takes+forwarded {
		t.Errorf("2 partitions: %d takes decided, %d forwarded, %d messages received: want received = takes + forwarded", takes, forwarded, received)
	}
}

// TestNatsCLIQuotaDurations: a quota take's max_wait is read in Go's
// syntax ("500ms") as in protojson's, and a take that may not wait at all
// is refused "no_wait", one that may wait too little "timeout"; with the
// nats CLI, on the README's namespace.
func TestNatsCLIQuotaDurations(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	cli := natstest.CLI(t, up.url)
	const logins = `{"dynamic_bucket_template": {"size": 5, "fill_rate": 1, "wait_timeout": "2s"}}`
	const sheddable = `{"bucket":"logins:alice","tokens":5,"max_wait":"500ms","client_id":"web-1","criticality":"SHEDDABLE"}`
	docHas(t, "README.md", "echo '"+logins+"' > logins.json", `nats kv put allot_config namespaces.logins "$(cat logins.json)"`)
	docHas(t, "subjects.md", "nats req allot.root.quota.take '"+sheddable+"'", "nats req allot.root.quota.take.logins.alice '{\"tokens\":5,\"max_wait\":\"0.5s\"}'")
	cli.MustRun("kv", "put", "allot_config", "namespaces.logins", logins)

	type reply struct{ Status, Reason, Wait string }
	take := func(subject, body string) reply {
		t.Helper()
		var r reply
		out, errs, err := cli.Run("req", subject, body)
		if err != nil || strings.Contains(errs, "Nats-Service-Error") || json.Unmarshal([]byte(out), &r) != nil || r.Status == "" {
			t.Fatalf("nats req %s %s: %v\n%s%s", subject, body, err, out, errs)
		}
		return r
	}
	cliWait(t, cli, "namespace logins applied", func(out string) bool {
		var r struct{ Matched string }
		return json.Unmarshal([]byte(out), &r) == nil && r.Matched == "logins:peek"
	}, "req", "allot.root.quota.take", `{"bucket":"logins:peek","tokens":0}`)
	// Read, not refused (5 tokens is above the bucket's 1 per request).
	if r := take("allot.root.quota.take", sheddable); r.Status != "REJECTED" || r.Reason != "too_many_tokens" {
		t.Errorf("subjects.md's take with max_wait 500ms: %+v", r)
	}
	// A bucket whose next token is 100s away once its one token is
	// taken: what a take gets depends on its max_wait alone.
	cli.MustRun("kv", "put", "allot_config", "namespaces.slow", `{"dynamic_bucket_template": {"size": 1, "fill_rate": 0.01, "wait_timeout": "1000s", "max_debt": "1000s"}}`)
	cliWait(t, cli, "namespace slow applied", func(out string) bool {
		var r struct{ Matched string }
		return json.Unmarshal([]byte(out), &r) == nil && r.Matched == "slow:peek"
	}, "req", "allot.root.quota.take", `{"bucket":"slow:peek","tokens":0}`)
	if r := take("allot.root.quota.take.slow.carol", `{"max_wait":"1m30s"}`); r.Status != "OK" {
		t.Fatalf("first take: %+v", r)
	}
	for _, c := range []struct{ maxWait, status, reason string }{
		{"0s", "REJECTED", "no_wait"},
		{"500ms", "REJECTED", "timeout"},
		{"0.5s", "REJECTED", "timeout"},
		{"1m30s", "REJECTED", "timeout"},
		{"200s", "OK_WAIT", ""},
	} {
		if r := take("allot.root.quota.take.slow.carol", `{"max_wait":"`+c.maxWait+`"}`); r.Status != c.status || r.Reason != c.reason {
			t.Errorf("take of an empty bucket with max_wait %s: %+v, want %s %s", c.maxWait, r, c.status, c.reason)
		}
	}
	if out, errs, err := cli.Run("req", "allot.root.quota.take.slow.carol", `{"max_wait":"soon"}`); err != nil || !strings.Contains(out+errs, "400") {
		t.Errorf("max_wait \"soon\": %v\n%s%s", err, out, errs)
	}
}
