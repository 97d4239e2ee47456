package faults

import (
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/netcut"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/internal/poll"
)

// The partition scenarios: a tree of two `allot up` processes, a root and
// a child level "eu", whose leaf link runs through a relay that really
// cuts it (the root does not advertise its own leaf address, so the child
// cannot reconnect around the relay). Three agents at each level want 30
// of 100; leases last 5 s and are refreshed every second; floors are half
// the fair share and last 20 s (a floor lease compressed like the rest).
const (
	cutResource   = "cut"
	cutCapacity   = 100.0
	cutWants      = 30.0
	cutLease      = 5 * time.Second
	cutRefresh    = time.Second
	cutFloorLease = 20 * time.Second
)

var leafAt = regexp.MustCompile(`accepting child levels at (nats-leaf://\S+)`)

// cutTemplate is the scenarios' template with capacity c.
func cutTemplate(c float64) []byte {
	return Template(cutResource, c, cutLease, cutRefresh, fmt.Sprintf(`,"partition":{"floor_share":0.5,"floor_lease":%q}`, cutFloorLease))
}

// upProcess is a running `allot up` and the URLs it printed.
type upProcess struct {
	url, leaf string
	cmd       *exec.Cmd
	exited    <-chan struct{}
}

// startLevel starts `allot up` with args and waits for it to announce
// itself (and, when it accepts children, its leaf-node URL: a line of its
// own, printed after the first).
func startLevel(t *testing.T, bin, name string, args ...string) upProcess {
	t.Helper()
	leaf := slices.Contains(args, "--leafnode-port")
	args = append([]string{"up", "--data-dir", t.TempDir(), "--port", "0", "--metrics-addr", "", "--election-ttl", ElectionTTL.String(), "--server-id", name}, args...)
	cmd, exited, out := StartProcess(t, name, bin, args...)
	p := upProcess{cmd: cmd, exited: exited}
	poll.Until(t, 60*time.Second, name+" to announce itself", func() bool {
		text := ReadOutput(out)
		m := upURL.FindStringSubmatch(text)
		if m == nil {
			return false
		}
		p.url = m[1]
		if l := leafAt.FindStringSubmatch(text); l != nil {
			p.leaf = l[1]
		}
		return !leaf || p.leaf != ""
	})
	return p
}

// nodeStats is what the tests read of a coordinator's STATS.
type nodeStats struct {
	Node         string `json:"node"`
	ParentError  string `json:"parent_error"`
	ParentLastOK string `json:"parent_last_ok"`
	Top          []struct {
		ID     string  `json:"id"`
		Floors float64 `json:"floors"`
	} `json:"top_resources"`
}

// nodeStatus is node's coordinator's STATS; ok is false if it does not
// answer.
func nodeStatus(nc *nats.Conn, node string) (st nodeStats, ok bool) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return st, false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.STATS.allot", inbox, nil); err != nil {
		return st, false
	}
	for {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			return st, false
		}
		if st, ok := opstatus.DecodeStats(m.Data, func(s *nodeStats) bool { return s.Node == node }); ok {
			return st, true
		}
	}
}

// nodeFloors is the sum of the floors node's coordinator counts for the
// cut resource (its STATS), or -1 if it does not answer.
func nodeFloors(nc *nats.Conn, node string) float64 {
	st, ok := nodeStatus(nc, node)
	if !ok {
		return -1
	}
	for _, r := range st.Top {
		if r.ID == cutResource {
			return r.Floors
		}
	}
	return 0
}

// inForce sums the capacity in force of resource at agents now.
func inForce(as []*agent.Agent) float64 {
	now, sum := time.Now(), 0.0
	for _, a := range as {
		for _, st := range a.Status() {
			if st.ResourceID == cutResource {
				sum += InForce(st, now)
			}
		}
	}
	return sum
}

// cutLeased reports whether every agent holds a lease of cutResource
// granted under the cut template: a positive one that ends within its
// lease length. The agents start as soon as the template is stored, and
// until the coordinator applies it (or, at a child, its mirror brings it)
// they are served under the default template, whose leases last a
// minute: cut then, and the client's lease outlives the cut.
func cutLeased(as []*agent.Agent) bool {
	if !Leased(as, cutResource) {
		return false
	}
	end := time.Now().Add(cutLease + time.Second)
	for _, a := range as {
		for _, st := range a.Status() {
			if st.ResourceID == cutResource && st.Expiry.After(end) {
				return false
			}
		}
	}
	return true
}

// TestLeafLinkCut cuts the link between a child level and the root for a
// while, with the capacity lowered during the cut in two of the cases:
// early (while the root still counts the child's lease) and late (65 s
// in, when the root used to forget the child). Before floors the root
// forgot the child after its lease and a 30 s retention and granted its
// share to its own clients while the child's clients kept theirs: 1.4×
// the capacity in force, and 2.67× with the capacity lowered.
func TestLeafLinkCut(t *testing.T) {
	t.Parallel()
	bin := BuildAllot(t)
	for _, tc := range []struct {
		name    string
		cut     time.Duration
		lowerAt time.Duration // 0: not lowered
	}{
		{"leaf-cut-5s", 5 * time.Second, 0},
		{"leaf-cut-120s", 120 * time.Second, 0},
		{"leaf-cut-120s-lowered-3s-in", 120 * time.Second, 3 * time.Second},
		{"leaf-cut-120s-lowered-70s-in", 120 * time.Second, 70 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			leafLinkCut(t, bin, tc.name, tc.cut, tc.lowerAt)
		})
	}
}

// cutTree is the scenarios' tree: a root level and a child level "eu"
// linked through a relay, three agents at each wanting cutWants, settled.
type cutTree struct {
	root, child             upProcess
	relay                   *netcut.Relay
	rnc, cnc                *nats.Conn
	rootAgents, childAgents []*agent.Agent
	all                     []*agent.Agent
}

// startCutTree starts the tree (the root's `allot up` with rootArgs as
// well) and returns once both levels hold their fair shares and the root
// counts the settled floors.
func startCutTree(t *testing.T, bin, scenario string, rootArgs ...string) *cutTree {
	t.Helper()
	tr := &cutTree{}
	tr.root = startLevel(t, bin, scenario+"-root", append([]string{"--leafnode-port", "-1", "--no-advertise"}, rootArgs...)...)
	u, err := url.Parse(tr.root.leaf)
	if err != nil || tr.root.leaf == "" {
		t.Fatalf("root's leaf URL %q: %v", tr.root.leaf, err)
	}
	if tr.relay, err = netcut.New(u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.relay.Close() })

	tr.rnc = connect(t, tr.root.url, "root side")
	PutTemplate(t, tr.rnc, cutResource, cutTemplate(cutCapacity))
	tr.child = startLevel(t, bin, scenario+"-eu", "--node", "eu", "--parent-node", "root", "--parent-url", "nats-leaf://"+tr.relay.Addr())
	tr.cnc = connect(t, tr.child.url, "child side")

	tr.rootAgents = StartAgents(t, tr.rnc, "root", 3, cutResource, cutWants)
	tr.childAgents = StartAgents(t, tr.cnc, "eu", 3, cutResource, cutWants, agent.WithNode("eu"))
	tr.all = append(append([]*agent.Agent{}, tr.rootAgents...), tr.childAgents...)
	share := cutCapacity / 6
	// The template reaches the child through its configuration mirror;
	// until then its clients are served under the default template.
	poll.Until(t, 60*time.Second, "fair shares at both levels", func() bool {
		return cutLeased(tr.all) && within(inForce(tr.rootAgents), 3*share) && within(inForce(tr.childAgents), 3*share)
	})
	// And the floors settled: the child confirmed the floor of its share
	// (25) after the larger one of its first answer, when it was alone.
	// Cut before that and the root keeps the larger floor reserved, as it
	// must: nobody can tell the child to use less.
	poll.Until(t, 30*time.Second, "the root to count the settled floors", func() bool {
		return within(nodeFloors(tr.rnc, "root"), 0.5*cutCapacity)
	})
	return tr
}

func leafLinkCut(t *testing.T, bin, scenario string, cut, lowerAt time.Duration) {
	tr := startCutTree(t, bin, scenario)
	relay, rnc, rootAgents, childAgents, all := tr.relay, tr.rnc, tr.rootAgents, tr.childAgents, tr.all

	s := NewSampler(cutResource, cutCapacity)
	s.Add(all...)
	s.Start(t)
	relay.Cut()
	start := time.Now()
	var rootBest, childEnd float64
	lowered := false
	for time.Since(start) < cut {
		if lowerAt > 0 && !lowered && time.Since(start) >= lowerAt {
			PutTemplate(t, rnc, cutResource, cutTemplate(40))
			s.Lower(40, cutLease+2*cutRefresh)
			lowered = true
		}
		if !lowered {
			rootBest = max(rootBest, inForce(rootAgents))
		}
		childEnd = inForce(childAgents)
		time.Sleep(50 * time.Millisecond)
	}
	relay.Restore()
	capacity := cutCapacity
	if lowered {
		capacity = 40
	}
	// After the cut the tree converges to fair shares again.
	poll.Until(t, 60*time.Second, "fair shares after the cut", func() bool {
		return Leased(all, cutResource) && within(inForce(rootAgents), capacity/2) && within(inForce(childAgents), capacity/2)
	})
	Report(t, scenario, s.Stop(), fmt.Sprintf("cut=%s root_clients_max=%.1f child_clients_at_end=%.1f", cut, rootBest, childEnd))
	if cut > cutLease+cutFloorLease+10*time.Second && childEnd > 0 {
		t.Errorf("the child's clients hold %.1f at the end of a cut longer than the floor lease", childEnd)
	}
	if lowerAt == 0 && cut > cutLease+10*time.Second && rootBest < 74 {
		t.Errorf("the root's clients held at most %.1f during the cut; want 75 (100 less the child's floor of 25)", rootBest)
	}
}

// TestClientCut cuts one agent's connection to the only level for longer
// than its lease and its floor: it runs on its floor, then on nothing,
// and is counted until then.
func TestClientCut(t *testing.T) {
	t.Parallel()
	bin := BuildAllot(t)
	const scenario = "client-cut-60s"
	root := startLevel(t, bin, scenario)
	u, err := url.Parse(root.url)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := netcut.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Close() })
	nc := connect(t, root.url, "reachable")
	PutTemplate(t, nc, cutResource, cutTemplate(cutCapacity))
	cut := connect(t, "nats://"+relay.Addr(), "cut off")
	others := StartAgents(t, nc, "reachable", 2, cutResource, 50)
	alone := StartAgents(t, cut, "cut-off", 1, cutResource, 50)
	all := append(append([]*agent.Agent{}, others...), alone...)
	// Every client at its fair share, the others included: the agents
	// start under the default template, whose larger grant to the cut-off
	// client the coordinator counts until that client's next request
	// confirms the smaller one. Cut before that, and the coordinator
	// rightly counts the larger grant until it ends, a minute later,
	// holding the others at (capacity - that grant) / 2 for the whole cut.
	poll.Until(t, 30*time.Second, "fair shares", func() bool {
		return cutLeased(all) && within(inForce(alone), cutCapacity/3) && within(inForce(others), 2*cutCapacity/3)
	})
	s := NewSampler(cutResource, cutCapacity)
	s.Add(all...)
	s.Start(t)
	relay.Cut()
	start := time.Now()
	var othersBest, aloneEnd float64
	for time.Since(start) < 60*time.Second {
		othersBest = max(othersBest, inForce(others))
		aloneEnd = inForce(alone)
		time.Sleep(50 * time.Millisecond)
	}
	relay.Restore()
	poll.Until(t, 60*time.Second, "fair shares after the cut", func() bool {
		return Leased(all, cutResource) && within(inForce(alone), cutCapacity/3)
	})
	Report(t, scenario, s.Stop(), fmt.Sprintf("others_max=%.1f cut_off_at_end=%.1f", othersBest, aloneEnd))
	if aloneEnd > 0 {
		t.Errorf("the cut-off client holds %.1f after a cut longer than its lease and floor", aloneEnd)
	}
	if want := cutCapacity - 0.5*cutCapacity/3; othersBest < want-1 {
		t.Errorf("the others held at most %.1f during the cut; want %.1f (the capacity less the cut-off client's floor)", othersBest, want)
	}
}

// connect connects to url for the test; it reconnects for ever.
func connect(t *testing.T, url, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// within reports whether got is want to within a percent.
func within(got, want float64) bool {
	return got > want*0.99 && got < want*1.01+1e-9
}
