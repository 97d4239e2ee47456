package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/natstest"
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
	faults.WaitFor(t, 20*time.Second, what, func() bool {
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
