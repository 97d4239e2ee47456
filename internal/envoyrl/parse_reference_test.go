package envoyrl_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allot/allot/internal/envoyrl"
)

// The reference's verdict (accepted or refused) on each document of
// refuseCases and acceptCases, recorded by TestRecordParseReference with
// its config_check command.
const parseVerdictsPath = "testdata/reference/parse_verdicts.json"

// acceptCase is a document the reference accepts.
type acceptCase struct {
	name, doc string
	// strict says whether Parse accepts it without ParseOptions.Reference.
	strict bool
}

var acceptCases = []acceptCase{
	{"minimal", "domain: d\n", true},
	{"leading document marker", "---\ndomain: d\n", true},
	{"comments and flow style", "# c\ndomain: d # c\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n", true},
	{"YAML 1.1 booleans", head + "  - key: k\n    shadow_mode: yes\n    quota_mode: off\n    detailed_metric: on\n", true},
	{"numbers as text", head + "  - key: 1\n    value: 010\n", true},
	{"timestamp as text", head + "  - key: k\n    value: 2024-01-01\n", true},
	{"boolean as text", head + "  - key: k\n    value: yes\n", true},
	{"null fields", head + "  - key: k\n    value:\n    rate_limit:\n    descriptors:\n", true},
	{"hex requests", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0x10}\n", true},
	{"largest requests", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967295}\n", true},
	{"zero requests", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n", true},
	{"unit in any case", head + "  - key: k\n    rate_limit: {unit: sEcOnD, requests_per_unit: 1}\n", true},
	{"unlimited with requests", head + "  - key: k\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n", true},
	{"empty replaces", head + "  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, replaces: []}\n", true},
	{"merge key", head + "  - &x\n    key: k\n  - <<: *x\n    value: v\n", true},
	{"star inside a value", head + "  - key: k\n    value: a*b\n", true},
	{"share_threshold on a wildcard key", head + "  - key: k*\n    share_threshold: true\n", true},
	{"same value under two parents", head + "  - key: a\n    descriptors: [{key: x}]\n  - key: b\n    descriptors: [{key: x}]\n", true},
	{"two documents", "domain: a\n---\ndomain: b\n", true},
	{"second document broken", "domain: a\n---\nfoo: 1\n", false},
}

type parseVerdicts map[string]string // case name: "ok" or the reference's error

func parseCaseDocs() map[string]string {
	docs := map[string]string{}
	for _, c := range refuseCases {
		docs["refuse: "+c.name] = c.doc
	}
	for _, c := range acceptCases {
		docs["accept: "+c.name] = c.doc
	}
	return docs
}

// parseAsReference loads doc with the reference's rules, as its
// config_check does: parse and compile.
func parseAsReference(doc string) error {
	ds, err := envoyrl.Parse("t.yaml", []byte(doc), envoyrl.ParseOptions{Reference: true})
	if err != nil {
		return err
	}
	_, err = envoyrl.NewConfig(ds, envoyrl.ConfigOptions{})
	return err
}

func TestParseReference(t *testing.T) {
	var verdicts parseVerdicts
	readJSON(t, parseVerdictsPath, &verdicts)
	compareParseVerdicts(t, verdicts)
}

func compareParseVerdicts(t *testing.T, verdicts parseVerdicts) {
	for name, doc := range parseCaseDocs() {
		v, ok := verdicts[name]
		if !ok {
			t.Errorf("%s: no recorded verdict: record again (TestRecordParseReference)", name)
			continue
		}
		err := parseAsReference(doc)
		if (err == nil) != (v == "ok") {
			t.Errorf("%s: reference mode says %v, the reference %q", name, err, v)
		}
	}
	for _, c := range refuseCases {
		if v := verdicts["refuse: "+c.name]; (v != "ok") != c.ref {
			t.Errorf("refuse: %s: the table says the reference refuses it: %t; it said %q", c.name, c.ref, v)
		}
	}
	for _, c := range acceptCases {
		if v := verdicts["accept: "+c.name]; v != "ok" {
			t.Errorf("accept: %s: the reference refused it: %q", c.name, v)
		}
		if _, err := envoyrl.Parse("t.yaml", []byte(c.doc), envoyrl.ParseOptions{}); (err == nil) != c.strict {
			t.Errorf("accept: %s: strict Parse: %v, want accepted=%t", c.name, err, c.strict)
		}
	}
}

// TestRecordParseReference runs the reference's config_check command
// (ALLOT_ENVOY_REFERENCE_CONFIG_CHECK names it) on every case document
// and records its verdicts.
func TestRecordParseReference(t *testing.T) {
	bin := os.Getenv("ALLOT_ENVOY_REFERENCE_CONFIG_CHECK")
	if bin == "" {
		t.Skip("ALLOT_ENVOY_REFERENCE_CONFIG_CHECK names no config_check command of the reference; the verdicts are compared by TestParseReference")
	}
	verdicts := parseVerdicts{}
	for name, doc := range parseCaseDocs() {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "-config_dir", dir).CombinedOutput()
		if err == nil {
			verdicts[name] = "ok"
			continue
		}
		if _, exit := err.(*exec.ExitError); !exit {
			t.Fatalf("running %s: %v", bin, err)
		}
		verdicts[name] = referenceError(string(out))
	}
	data, err := json.MarshalIndent(verdicts, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(parseVerdictsPath, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	compareParseVerdicts(t, verdicts)
}

// referenceError keeps config_check's error line, without the temporary
// directory's name.
func referenceError(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "config.yaml: "); i >= 0 {
			return strings.TrimSpace(line[i+len("config.yaml: "):])
		}
	}
	return strings.TrimSpace(out)
}
