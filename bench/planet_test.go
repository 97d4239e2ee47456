package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanetShortWritesResults runs the short planet benchmark and checks
// that it writes its JSON, markdown and CSV, with no over-grant reported.
func TestPlanetShortWritesResults(t *testing.T) {
	dir := t.TempDir()
	r, err := RunPlanet(context.Background(), &Env{OutDir: dir, Short: true}, PlanetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.res.OverGrants != 0 || r.res.MaxInForce > 1+1e-9 {
		t.Fatalf("over-grant: %d samples, max %.6f", r.res.OverGrants, r.res.MaxInForce)
	}
	var back PlanetResult
	data, err := os.ReadFile(filepath.Join(dir, "planet.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.res == nil || back.res.ClientsTotal != 2000 || len(back.res.Events) != 2 || back.Machine != r.Machine {
		t.Fatalf("planet.json does not hold the run: %s", data[:min(len(data), 300)])
	}
	md, err := os.ReadFile(filepath.Join(dir, "planet.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "0 samples above 1: met") {
		t.Fatalf("planet.md does not report the over-grant check:\n%s", md)
	}
	csv, err := os.ReadFile(filepath.Join(dir, "planet.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csv), "\n"); lines < 100 {
		t.Fatalf("planet.csv has %d lines", lines)
	}
}
