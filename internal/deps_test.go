// Package internal holds no code: this file keeps allot's layers apart. A
// test here runs with every `go test ./...`.
package internal

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/allot/allot/"

// Packages a layer may be kept from linking: import paths, each standing
// for itself and everything under it.
const (
	natsClient = "github.com/nats-io/nats.go" // its jetstream and micro too
	natsServer = "github.com/nats-io/nats-server/v2"
	jetStream  = "github.com/nats-io/nats.go/jetstream"
	testingPkg = "testing"
)

// layerRules say which packages must not link which. Each rule's why is
// what the failure tells whoever added the edge.
var layerRules = []struct {
	pkgs   []string // go list patterns, relative to the module
	skip   string   // packages under this prefix of pkgs are exempt
	forbid []string
	why    string
}{
	{
		pkgs:   []string{"internal/alloc/...", "internal/ledger/...", "internal/quota/...", "internal/domainlimit/...", "internal/config/...", "internal/envoyrl/...", "internal/rlqs/..."},
		forbid: []string{natsClient, natsServer, testingPkg},
		why:    "the decision cores are pure: no NATS, clock passed in; I/O belongs to the servers and internal/configkv",
	},
	{
		pkgs:   []string{"agent/..."},
		skip:   "agent/internal/", // the integrations' test and example harnesses
		forbid: []string{natsServer, jetStream, testingPkg},
		why:    "services embed the agent: it must not drag a NATS server, JetStream (only servers keep state in it) or the testing package (and its flags) into them",
	},
	{
		pkgs:   []string{"internal/wire"},
		forbid: []string{natsClient},
		why:    "wire is plain data; it takes headers and names, not NATS types",
	},
	{
		pkgs:   []string{"internal/subjects"},
		forbid: []string{natsClient, natsServer, module + "internal/wire", testingPkg},
		why:    "subjects only spells names: every layer (the decision cores, the election, the agent) may import it without linking NATS or the codecs",
	},
	{
		pkgs:   []string{"status"},
		forbid: []string{natsClient, natsServer, module + "internal", testingPkg},
		why:    "status is the servers' reports as plain data: whoever reads them (a dashboard, a collector, a program outside the module) must not link NATS or allot's internals",
	},
	{
		pkgs:   []string{"intake"},
		forbid: []string{natsClient, natsServer, module + "internal", testingPkg},
		why:    "intake is the servers' intake limits and counts as plain data: a program that configures a server or reads its STATS must not link NATS or allot's internals through it",
	},
	{
		pkgs:   []string{"replica"},
		forbid: []string{natsClient, natsServer, module + "internal", testingPkg},
		why:    "replica is the elected services' election options as plain data: a program that configures a replica must not link allot's internals through it",
	},
	{
		pkgs: []string{"dashboard", "metrics"},
		forbid: []string{module + "coordinator", module + "quotaserver", module + "domainserver", module + "internal/envoyserver",
			module + "internal/ledger", module + "internal/election"},
		why: "operators' views read the status package, not the servers or their cores: take the type from status (the servers fill it)",
	},
	{
		pkgs:   []string{"internal/names"},
		forbid: []string{natsClient, natsServer, "google.golang.org/protobuf", module + "internal/wire", testingPkg},
		why:    "names is the fast decoders' shared hook: domainwire takes it, so it must not link protobuf, NATS or wire's codecs",
	},
	{
		pkgs:   []string{"internal/swar"},
		forbid: []string{natsClient, natsServer, "google.golang.org/protobuf", module + "internal/wire", testingPkg},
		why:    "swar is the scanners' shared byte tests: domainwire takes it as well as wire, so it links nothing",
	},
	{
		pkgs:   []string{"internal/domainwire"},
		forbid: []string{"google.golang.org/protobuf", module + "internal/wire"},
		why:    "the domain contract is plain JSON: agents that only speak domains must not link protobuf or the lease codecs (share through a leaf such as internal/names)",
	},
	{
		pkgs:   []string{"internal/election"},
		forbid: []string{module + "internal/wire"},
		why:    "the election needs node names (internal/subjects), not the payload codecs",
	},
	{
		pkgs:   []string{"cmd/allot"},
		forbid: []string{testingPkg},
		why:    "the binary must not link testing (and its flags); the benchmarks it embeds once pulled it in: move what imports it into _test.go files",
	},
}

// TestLayers checks layerRules with `go list -deps`, and names the chain
// of imports that breaks a rule.
func TestLayers(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	for _, r := range layerRules {
		var patterns []string
		for _, p := range r.pkgs {
			patterns = append(patterns, module+p)
		}
		roots := goList(t, gobin, append([]string{"-f", "{{.ImportPath}}"}, patterns...))
		roots = slices.DeleteFunc(roots, func(p string) bool { return r.skip != "" && strings.HasPrefix(p, module+r.skip) })
		if len(roots) == 0 {
			t.Errorf("%v: no packages", r.pkgs)
			continue
		}
		imports := importGraph(t, gobin, roots)
		for _, root := range roots {
			for _, bad := range r.forbid {
				if chain := pathTo(imports, root, bad); chain != nil {
					t.Errorf("%s links %s: %s\n\t%s", strings.TrimPrefix(root, module), strings.TrimPrefix(bad, module),
						strings.Join(chain, " -> "), r.why)
				}
			}
		}
	}
}

// goList runs go list with args and returns its output's lines.
func goList(t *testing.T, gobin string, args []string) []string {
	t.Helper()
	out, err := exec.Command(gobin, append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// importGraph returns each package that roots link with what it imports.
func importGraph(t *testing.T, gobin string, roots []string) map[string][]string {
	t.Helper()
	lines := goList(t, gobin, append([]string{"-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, roots...))
	g := make(map[string][]string, len(lines))
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	return g
}

// pathTo returns the shortest chain of imports from root to a package that
// is bad or under it, nil if root links none.
func pathTo(imports map[string][]string, root, bad string) []string {
	matches := func(p string) bool { return p == bad || strings.HasPrefix(p, bad+"/") }
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if matches(p) {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, strings.TrimPrefix(p, module))
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}
