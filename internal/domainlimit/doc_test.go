package domainlimit

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docSection returns the lines after marker in docs/domains.md up to the
// first blank line after the content starts.
func docSection(t *testing.T, doc, marker string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, marker+"\n")
	if !ok {
		t.Fatalf("docs/domains.md has no %q", marker)
	}
	var out []string
	for _, line := range strings.Split(rest, "\n") {
		if strings.TrimSpace(line) == "" {
			break
		}
		out = append(out, line)
	}
	return out
}

// tableRows returns the cells of a markdown table's body rows.
func tableRows(lines []string) [][]string {
	var rows [][]string
	for _, l := range lines[2:] { // header and separator
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	return rows
}

// TestDocWorkedExample replays the example configuration and the worked
// example tables of docs/domains.md, read from the file itself.
func TestDocWorkedExample(t *testing.T) {
	raw, err := os.ReadFile("../../docs/domains.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	block := docSection(t, doc, "<!-- example config -->")
	yaml := strings.Join(block[1:len(block)-1], "\n") // inside the ``` fence
	ns, err := ParseNamespace("shop", []byte(yaml))
	if err != nil {
		t.Fatalf("the example configuration: %v", err)
	}

	api, err := NewRate(ns.Resources["api"].Rate)
	if err != nil {
		t.Fatal(err)
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("bad number %q in the doc", s)
		}
		return n
	}
	yes := func(s string) bool { return s == "yes" }
	rows := tableRows(docSection(t, doc, "<!-- worked example: api -->"))
	if len(rows) < 5 {
		t.Fatalf("only %d rows in the api example", len(rows))
	}
	for _, r := range rows {
		at, err := time.ParseDuration(r[0])
		if err != nil {
			t.Fatal(err)
		}
		res, err := api.Request(epoch.Add(at).UnixNano(), r[1], num(r[2]), num(r[3]))
		if err != nil {
			t.Fatal(err)
		}
		if res.Granted != num(r[4]) || int64(res.Tier) != num(r[5]) || res.TierHits != num(r[6]) || res.Burst != yes(r[7]) || res.HardLimited != yes(r[8]) {
			t.Errorf("row %q: got %+v", r, res)
		}
	}

	sb, err := NewCopies(ns.Resources["sandboxes"].Copies)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range tableRows(docSection(t, doc, "<!-- worked example: sandboxes -->")) {
		domain, copies := r[1], num(r[2])
		switch r[0] {
		case "reserve":
			res, err := sb.Reserve(domain, copies, num(r[3]))
			if err != nil || res.Granted != num(r[4]) {
				t.Errorf("row %q: got %+v, %v", r, res, err)
			}
		case "release":
			err := sb.Release(domain, strings.Split(r[3], ","), copies)
			if (r[4] == "ok") != (err == nil) || (r[4] == "not held") != errors.Is(err, ErrNotHeld) {
				t.Errorf("row %q: release error %v", r, err)
			}
		default:
			t.Fatalf("row %q: unknown op", r)
		}
		if sb.Holds(domain) != num(r[5]) || sb.Global() != num(r[6]) {
			t.Errorf("row %q: holds %d, global %d", r, sb.Holds(domain), sb.Global())
		}
	}
}
