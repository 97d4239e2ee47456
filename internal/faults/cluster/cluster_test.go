// Package cluster runs the fault scenarios of one allot level on a
// three-server NATS cluster, as production runs it. It is a package of its
// own so that its scenarios and the rest of internal/faults run as two
// test binaries, each well within go test's default time-out on a busy
// machine.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allot/allot/internal/faults"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/proto/allotpb"
)

// The cluster scenarios run one allot level the way production does: a
// three-server NATS cluster (nats-server processes built from go.mod's
// version) and three `allot coordinator --bucket-replicas 3` processes,
// coordinator cN connected to server sN only, as the shipped systemd unit
// connects to its host's server (it finds the others through the
// cluster). Twelve agents with mixed demand (three each wanting 22, 12,
// 5 and 1 of 120) share the resource, spread over the servers.
//
// Each scenario injects one fault and reports the fraction handed out
// over time (what the agents may use, each capped by its wants, over
// what the demand allows: here the capacity), besides the FAULT line's
// max in force ÷ capacity, which must stay ≤ 1. Once a coordinator
// answers again ("service"), the fraction must reach 90% within two
// refresh intervals. The intervals are long next to what a loaded
// machine adds: a refresh interval of 3 s against requests that take
// milliseconds (at worst a few hundred under -race), and agents that
// give a request up after 1 s, so every agent's first retry after the
// service returns lands within one refresh interval (its backoff is
// capped at the interval) plus that second. What the assertion checks is
// then what the successor does with the first request of each client
// (credit what it holds, end learning once every holder is heard, hand
// out the rest), not how fast the machine is.
//
// Leases last 20 s where a coordinator fails over: docs/election.md's
// rule for a cluster (refresh 3 s + election TTL 12 s + 1 s + clock skew
// 2 s, with room), so clients ride through the failover and the
// successor's holder promise covers its takeover. Where the level only
// loses servers, leases last 8 s: shorter than the two longest outages
// (15 s, 10 s), so those scenarios cover clients whose leases lapsed.
const (
	clResource     = "level"
	clCapacity     = 120.0
	clRefresh      = 3 * time.Second
	clLease        = 20 * time.Second
	clShortLease   = 8 * time.Second
	clAgentTimeout = time.Second
	clServers      = 3
	// clTarget is the fraction of what the demand allows that must be
	// handed out within clRecovery of the service's return.
	clTarget   = 0.9
	clRecovery = 2 * clRefresh
)

// clWants are the agents' wants: fair shares of 22, 12, 5 and 1.
var clWants = []float64{22, 22, 22, 12, 12, 12, 5, 5, 5, 1, 1, 1}

// clusterLevel is one level under test.
type clusterLevel struct {
	t      *testing.T
	nats   *faults.ProcCluster
	coords []*coordProc
	nc     *nats.Conn
	js     jetstream.JetStream
	load   *faults.Sampler
	agents []*agent.Agent
	probe  *prober
}

// coordProc is one `allot coordinator` process.
type coordProc struct {
	id     string
	server *faults.ServerProc
	cmd    interface{ Kill() error }
	exited <-chan struct{}
}

// clusterConn connects to every server of c, server first, pinging as
// the coordinators do so that a frozen server is left within seconds.
func clusterConn(t *testing.T, c *faults.ProcCluster, first int, name string) *nats.Conn {
	t.Helper()
	var urls []string
	for i := range c.Servers {
		urls = append(urls, c.Servers[(first+i)%len(c.Servers)].URL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name(name), nats.DontRandomize(), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startClusterLevel starts the servers, the coordinators and the agents,
// and returns once every agent holds a lease and the fraction handed
// out has reached the target.
func startClusterLevel(t *testing.T, natsBin, allotBin string, lease time.Duration) *clusterLevel {
	t.Helper()
	l := &clusterLevel{t: t, nats: faults.StartProcCluster(t, natsBin, clServers)}
	for i, s := range l.nats.Servers {
		id := fmt.Sprintf("c%d", i)
		cmd, exited, _ := faults.StartProcess(t, "coordinator-"+id, allotBin, "coordinator", "--nats", s.URL(), "--server-id", id,
			"--bucket-replicas", "3", "--log-level", "info")
		l.coords = append(l.coords, &coordProc{id: id, server: s, cmd: cmd.Process, exited: exited})
	}
	l.nc = clusterConn(t, l.nats, 0, "faults test")
	var err error
	if l.js, err = jetstream.New(l.nc); err != nil {
		t.Fatal(err)
	}
	l.putTemplate(lease)
	l.probe = startProber(t, clusterConn(t, l.nats, 1, "faults probe"))
	poll.Until(t, 60*time.Second, "a coordinator to answer", func() bool { return !l.probe.firstAfter(time.Time{}).IsZero() })

	l.load = faults.NewSampler(clResource, clCapacity)
	var agents []*agent.Agent
	for i, w := range clWants {
		nc := clusterConn(t, l.nats, i%clServers, fmt.Sprintf("faults agents %d", i))
		a, err := agent.New(nc, agent.WithClientID(fmt.Sprintf("agent-%d", i)), agent.WithLogger(faults.TestLogger(t)), agent.WithRequestTimeout(clAgentTimeout))
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
		if _, err := a.Rate(clResource, agent.WithWants(w)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { faults.CloseAgents(agents) })
	l.agents = agents
	l.load.Add(agents...)
	l.load.Start(t)
	poll.Until(t, 60*time.Second, "every agent to hold a lease and the target handed out", func() bool {
		pts := l.load.Series()
		return faults.Leased(agents, clResource) && len(pts) > 0 && pts[len(pts)-1].HandedOut >= clTarget
	})
	// And the floors settled in the lease record: the first agents were
	// given large floors (a fair share of few claimants), and a successor
	// keeps back the recorded floor ceiling, less the floors agents
	// report, until the floors end (docs/election.md, "Floors across a
	// failover"). A fault injected before the record follows the floors
	// down measures that, not the takeover: it held about 60% back for
	// minutes.
	poll.Until(t, 60*time.Second, "the lease record's floor ceiling to follow the settled floors", func() bool {
		return l.recordedFloorCeiling() <= clSettledFloors*1.1
	})
	return l
}

// clSettledFloors is the sum of the agents' floors once settled: half the
// fair share of the capacity over the 12 agents (5), or the lease when
// that is less (the three agents wanting 1).
const clSettledFloors = 9*5 + 3*1

// recordedFloorCeiling is the floor ceiling of the scenarios' resource in
// the lease record (+Inf when it cannot be read).
func (l *clusterLevel) recordedFloorCeiling() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := l.js.KeyValue(ctx, coordinator.DefaultStateBucket)
	if err != nil {
		return math.Inf(1)
	}
	e, err := kv.Get(ctx, coordinator.DefaultNode+".leases")
	if err != nil {
		return math.Inf(1)
	}
	var h allotpb.LeaseHorizon
	if protojson.Unmarshal(e.Value(), &h) != nil {
		return math.Inf(1)
	}
	s := h.GetResources()[clResource]
	if s == nil || s.GetFloorExpiry() == nil {
		return math.Inf(1)
	}
	return s.GetFloorCeiling()
}

// describeAgents lists what each agent holds, one line each.
func (l *clusterLevel) describeAgents() string {
	var b strings.Builder
	now := time.Now()
	for _, a := range l.agents {
		for _, st := range a.Status() {
			fmt.Fprintf(&b, "  %s: wants %g, in force %g (leased %v, granted %g, expires in %s, refresh %s, last refresh %s ago, mode %v, safe %g), term %d, last error %v\n",
				a.ClientID(), st.Wants, faults.InForce(st, now), st.Leased, st.Granted, st.Expiry.Sub(now).Round(time.Millisecond), st.RefreshInterval,
				now.Sub(st.LastRefresh).Round(time.Millisecond), st.Mode, st.SafeCapacity, a.Term(), st.LastError)
		}
	}
	// And what the serving coordinator says of the resource: learning,
	// what it counts outstanding (a predecessor's remainder included) and
	// the floors.
	if m, err := l.nc.Request("$SRV.STATS.allot", nil, 2*time.Second); err == nil {
		type top struct {
			Term uint64            `json:"term"`
			Top  []json.RawMessage `json:"top_resources"`
		}
		if st, ok := opstatus.DecodeStats(m.Data, func(s *top) bool { return len(s.Top) > 0 }); ok {
			fmt.Fprintf(&b, "  coordinator (term %d): %s\n", st.Term, st.Top[0])
		}
	}
	return b.String()
}

// putTemplate stores the scenarios' template (with lease) in the configuration
// bucket, creating it with three replicas as the coordinators do if it is
// not there yet.
func (l *clusterLevel) putTemplate(lease time.Duration) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := configkv.OpenBucket(ctx, l.js, configkv.DefaultBucket, true, configkv.Replicas(3))
	if err != nil {
		l.t.Fatal(err)
	}
	if _, err := kv.Put(ctx, config.Key(clResource), faults.Template(clResource, clCapacity, lease, clRefresh, "")); err != nil {
		l.t.Fatal(err)
	}
}

// serving returns the coordinator that holds the node's election key and
// its term, as the election bucket says.
func (l *clusterLevel) serving() (*coordProc, uint64) {
	l.t.Helper()
	var coord *coordProc
	var term uint64
	poll.Until(l.t, 30*time.Second, "the election key", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		kv, err := l.js.KeyValue(ctx, election.DefaultBucket)
		if err != nil {
			return false
		}
		e, err := kv.Get(ctx, "root")
		if err != nil {
			return false
		}
		var v election.Value
		if json.Unmarshal(e.Value(), &v) != nil {
			return false
		}
		term = v.Term
		if term == 0 {
			term = e.Revision()
		}
		for _, c := range l.coords {
			if c.id == v.ID {
				coord = c
			}
		}
		return coord != nil
	})
	return coord, term
}

// streamLeader returns the server that leads stream.
func (l *clusterLevel) streamLeader(stream string) *faults.ServerProc {
	l.t.Helper()
	var s *faults.ServerProc
	poll.Until(l.t, 30*time.Second, "the leader of "+stream, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		name, err := faults.StreamLeader(ctx, l.nc, stream)
		s = l.nats.Server(name)
		return err == nil && s != nil
	})
	return s
}

// moveStreamLeader asks stream's leader to step down until the stream is
// led by a server other than avoid.
func (l *clusterLevel) moveStreamLeader(stream string, avoid *faults.ServerProc) {
	l.t.Helper()
	for range 10 {
		cur := l.streamLeader(stream)
		if cur != avoid {
			return
		}
		if _, err := l.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second); err != nil {
			l.t.Logf("step down the leader of %s: %v", stream, err)
		}
		poll.Ok(10*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			name, err := faults.StreamLeader(ctx, l.nc, stream)
			return err == nil && name != cur.Name()
		})
	}
	l.t.Fatalf("%s is still led by %s", stream, avoid.Name())
}

// prober asks the node for capacity of another resource every 100 ms
// and remembers when it was answered.
type prober struct {
	mu      sync.Mutex
	answers []probeAnswer
}

type probeAnswer struct {
	sent, at time.Time
	term     uint64
}

func startProber(t *testing.T, nc *nats.Conn) *prober {
	p := &prober{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			sent := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			resp, err := faults.Get(rctx, nc, "probe", "probe", 0)
			rcancel()
			if err == nil {
				p.mu.Lock()
				p.answers = append(p.answers, probeAnswer{sent: sent, at: time.Now(), term: resp.GetTerm()})
				p.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(sent.Add(100 * time.Millisecond))):
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p
}

// firstAfter returns when the first probe sent after since was answered
// (zero if none yet).
func (p *prober) firstAfter(since time.Time) time.Time {
	at, _ := p.first(since)
	return at
}

func (p *prober) first(since time.Time) (time.Time, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.answers {
		if !a.sent.Before(since) {
			return a.at, a.term
		}
	}
	return time.Time{}, 0
}

// longestGap returns the longest time without an answer between from
// and to.
func (p *prober) longestGap(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, gap := from, time.Duration(0)
	for _, a := range p.answers {
		if a.at.Before(from) {
			continue
		}
		if a.at.After(to) {
			break
		}
		gap = max(gap, a.at.Sub(prev))
		prev = a.at
	}
	return max(gap, to.Sub(prev))
}

// clusterFault is one scenario: arrange places what the fault needs
// (optional), inject injects it and returns when it began and from when
// the level can serve again (servers back, the last kill; the fault's
// start where the level should route around it). check, if set, checks
// what the scenario promises beyond the common assertions.
type clusterFault struct {
	name    string
	lease   time.Duration
	arrange func(l *clusterLevel, serving *coordProc)
	inject  func(l *clusterLevel, serving *coordProc) (began, over time.Time)
	check   func(t *testing.T, o clusterOutcome)
}

// clusterOutcome is what a scenario observed.
type clusterOutcome struct {
	termBefore, termAfter uint64
	// service is when the node answered again, ended when the fault did
	// (SIGCONT for a freeze; zero otherwise).
	service, ended time.Time
}

// sameTerm checks that the serving coordinator kept leading: the node
// never stopped for an election.
func sameTerm(t *testing.T, o clusterOutcome) {
	if o.termAfter != o.termBefore {
		t.Errorf("the node changed leader (term %d, then %d): its leader should have kept its term through the loss of one server", o.termBefore, o.termAfter)
	}
}

// TestClusterFaults runs the cluster scenarios in parallel, each on a
// level of its own (about a minute each).
func TestClusterFaults(t *testing.T) {
	t.Parallel()
	natsBin, allotBin := faults.BuildNATSServer(t), faults.BuildAllot(t)
	killServer := func(l *clusterLevel, s *faults.ServerProc) time.Time {
		at := time.Now()
		s.Kill(l.t)
		return at
	}
	for _, f := range []clusterFault{
		{
			// The serving coordinator's own server: the coordinator
			// reconnects to another server and keeps leading. The
			// election and state streams are led elsewhere (the next
			// scenario loses the election stream's leader).
			name:  "cluster-kill-coordinator-server",
			lease: clShortLease,
			arrange: func(l *clusterLevel, serving *coordProc) {
				l.moveStreamLeader("KV_"+election.DefaultBucket, serving.server)
				l.moveStreamLeader("KV_allot_state", serving.server)
			},
			inject: func(l *clusterLevel, serving *coordProc) (time.Time, time.Time) {
				at := killServer(l, serving.server)
				return at, at
			},
			check: sameTerm,
		},
		{
			// The server that leads the election stream, not the serving
			// coordinator's: no write to the election bucket lands until
			// the others elect a new stream leader (4–9 s); the leader's
			// 12 s TTL outlasts that.
			name:  "cluster-kill-election-leader",
			lease: clShortLease,
			arrange: func(l *clusterLevel, serving *coordProc) {
				l.moveStreamLeader("KV_"+election.DefaultBucket, serving.server)
			},
			inject: func(l *clusterLevel, _ *coordProc) (time.Time, time.Time) {
				at := killServer(l, l.streamLeader("KV_"+election.DefaultBucket))
				return at, at
			},
			check: sameTerm,
		},
		{
			// Two of three servers for 15 s, the serving coordinator's
			// among them: no JetStream quorum, so the leader lapses, and
			// the outage outlasts the leases.
			name:  "cluster-two-servers-down-15s",
			lease: clShortLease,
			inject: func(l *clusterLevel, serving *coordProc) (time.Time, time.Time) {
				other := l.nats.Servers[0]
				if other == serving.server {
					other = l.nats.Servers[1]
				}
				at := killServer(l, serving.server)
				other.Kill(l.t)
				time.Sleep(15 * time.Second) // the outage's length
				serving.server.Start(l.t)
				other.Start(l.t)
				return at, time.Now()
			},
		},
		{
			// The serving coordinator's server frozen for 10 s: its
			// connections stay open but nothing moves; the coordinator
			// leaves it after two unanswered pings (about 3 s) and keeps
			// leading through another server, long before the freeze
			// ends. With nats.go's default pings it stayed silent on
			// the frozen server until SIGCONT.
			name:  "cluster-sigstop-server-10s",
			lease: clShortLease,
			inject: func(l *clusterLevel, serving *coordProc) (time.Time, time.Time) {
				at := time.Now()
				serving.server.Signal(l.t, syscall.SIGSTOP)
				time.Sleep(10 * time.Second) // the freeze's length
				serving.server.Signal(l.t, syscall.SIGCONT)
				return at, at
			},
			check: func(t *testing.T, o clusterOutcome) {
				sameTerm(t, o)
				if !o.service.Before(o.ended) {
					t.Errorf("the node answered again only %s after the frozen server resumed; its leader should have left the server while it was frozen", o.service.Sub(o.ended).Round(time.Millisecond))
				}
			},
		},
		{
			// The serving coordinator's server, then 1 s later the
			// coordinator itself (a host going down piecemeal): a
			// follower takes over once the key expires.
			name:  "cluster-kill-server-then-coordinator",
			lease: clLease,
			inject: func(l *clusterLevel, serving *coordProc) (time.Time, time.Time) {
				at := killServer(l, serving.server)
				time.Sleep(time.Second)
				if err := serving.cmd.Kill(); err != nil {
					l.t.Fatal(err)
				}
				<-serving.exited
				return at, time.Now()
			},
		},
	} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			runClusterFault(t, natsBin, allotBin, f)
		})
	}
}

func runClusterFault(t *testing.T, natsBin, allotBin string, f clusterFault) {
	l := startClusterLevel(t, natsBin, allotBin, f.lease)
	serving, termBefore := l.serving()
	if f.arrange != nil {
		f.arrange(l, serving)
	}
	time.Sleep(clRefresh) // steady state before the fault, in the series
	began, over := f.inject(l, serving)
	ended := time.Now()
	var service time.Time
	var termAfter uint64
	poll.Until(t, 90*time.Second, "a coordinator to answer after the fault", func() bool {
		service, termAfter = l.probe.first(over)
		return !service.IsZero()
	})
	end := service.Add(2 * clRecovery)
	time.Sleep(time.Until(end)) // the observation window
	r := l.load.Stop()
	series := l.load.Series()

	reached := time.Time{}
	low := math.Inf(1)
	for _, p := range series {
		if p.At.Before(service) {
			continue
		}
		if reached.IsZero() && p.HandedOut >= clTarget {
			reached = p.At
		}
		if !p.At.Before(service.Add(clRecovery)) {
			low = min(low, p.HandedOut)
		}
	}
	toTarget := "never"
	if !reached.IsZero() {
		toTarget = reached.Sub(service).Round(time.Millisecond).String()
	}
	faults.Report(t, f.name, r,
		fmt.Sprintf("service_after=%s", service.Sub(began).Round(time.Millisecond)),
		fmt.Sprintf("longest_unanswered=%s", l.probe.longestGap(began.Add(-time.Second), service).Round(time.Millisecond)),
		fmt.Sprintf("term_before=%d term_after=%d", termBefore, termAfter),
		fmt.Sprintf("to_%.0f%%_after_service=%s", 100*clTarget, toTarget),
		fmt.Sprintf("min_handed_out_from_2_refreshes=%.3f", low))
	t.Logf("FAULT-SERIES %s %s", f.name, faults.SeriesLine(series, began, 500*time.Millisecond))
	if reached.IsZero() || reached.After(service.Add(clRecovery)) {
		t.Errorf("%s: %.0f%% of what the demand allows was not handed out within %v of the service returning (reached after %s); the agents at the end:\n%s", f.name, 100*clTarget, clRecovery, toTarget, l.describeAgents())
	}
	if f.check != nil {
		f.check(t, clusterOutcome{termBefore: termBefore, termAfter: termAfter, service: service, ended: ended})
	}
}
