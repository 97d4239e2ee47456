// Package bench measures allot: coordinator throughput and latency under
// load against a bare NATS echo responder (Load), allocation round cost and
// coordinator memory per client lease against the number of clients
// (Scale), the agent's limiter hot path against golang.org/x/time/rate
// (Agent), and convergence of real agents and a real coordinator over an
// embedded nats-server with compressed time (Sim).
//
// Every headline figure is measured next to a baseline in the same run and
// reported as a ratio, because the machines these run on are shared and
// noisy. Results are written as JSON and markdown tables, plots as SVG.
// `allot bench` runs these from the command line; bench/README.md records
// the latest results.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Env is what every benchmark needs from its caller.
type Env struct {
	// OutDir receives the JSON, markdown and SVG results. Empty writes
	// nothing.
	OutDir string
	// Progress receives progress lines while a benchmark runs; nil is
	// silent.
	Progress io.Writer
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger
	// Short selects the short variant of each benchmark (what `task bench`
	// runs).
	Short bool
	// Child builds the command that runs a helper role ("coordinator" or
	// "echo") in a separate process; see ServeChild. Nil runs helpers in
	// this process, in which case CPU and RSS cover the whole process.
	Child ChildFunc
	// Allot runs the allot binary itself (the Envoy benchmark starts
	// allot up, coordinator and agent); nil when it cannot.
	Allot AllotFunc
	// ProfileDir, if set, has every helper child process write its CPU
	// profile (<role>-<pid>.cpu.pprof, its whole life) and heap profile
	// (<role>-<pid>.heap.pprof, when asked to stop) there.
	ProfileDir string
}

func (e *Env) logger() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

func (e *Env) progressf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, format+"\n", args...)
	}
}

// writeJSON writes v as indented JSON to OutDir/name.
func (e *Env) writeJSON(name string, v any) error {
	if e.OutDir == "" {
		return nil
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode %s: %w", name, err)
	}
	return e.writeFile(name, append(data, '\n'))
}

func (e *Env) writeFile(name string, data []byte) error {
	if e.OutDir == "" {
		return nil
	}
	if err := os.MkdirAll(e.OutDir, 0o755); err != nil {
		return fmt.Errorf("bench: results dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(e.OutDir, name), data, 0o644); err != nil {
		return fmt.Errorf("bench: write %s: %w", name, err)
	}
	return nil
}

// Machine describes where a run happened.
type Machine struct {
	Date      string  `json:"date"`
	GoVersion string  `json:"go_version"`
	OS        string  `json:"os"`
	Arch      string  `json:"arch"`
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpu_model,omitempty"`
	MemoryGiB float64 `json:"memory_gib,omitempty"`
	Kernel    string  `json:"kernel,omitempty"`
	// LoadAvg is the 1-minute load average when the run started: above
	// zero-ish means other work shared the machine.
	LoadAvg string `json:"load_avg,omitempty"`
}

// DescribeMachine reads what it can about this machine.
func DescribeMachine() Machine {
	m := Machine{
		Date:      time.Now().UTC().Format(time.RFC3339),
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		CPUs:      runtime.NumCPU(),
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGiB = kb / (1 << 20)
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// Markdown renders the machine as a sentence.
func (m Machine) Markdown() string {
	return fmt.Sprintf("%s, %d CPUs (%s), %.0f GiB, Linux %s, %s %s/%s, load average at start %s",
		m.Date, m.CPUs, m.CPUModel, m.MemoryGiB, m.Kernel, m.GoVersion, m.OS, m.Arch, m.LoadAvg)
}

// table renders a markdown table.
// targetTable is the table of closed-loop targets (a baseline and the
// responders measured against it): throughput, latency, CPU, memory and
// errors per target.
func targetTable(targets ...LoadTarget) string {
	rows := make([][]string, len(targets))
	for i, t := range targets {
		rows[i] = []string{t.Name, f0(t.RPS), f0(t.P50us), f0(t.P99us), f0(t.P999us), f2(t.CPUPerReqUs), f1(t.RSSMiB), strconv.FormatInt(t.Errors, 10)}
	}
	return table([]string{"responder", "req/s", "p50 µs", "p99 µs", "p99.9 µs", "CPU µs/req", "RSS MiB", "errors"}, rows)
}

func table(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// verdict renders whether a target was met.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }
func f3(v float64) string { return fmt.Sprintf("%.3f", v) }
