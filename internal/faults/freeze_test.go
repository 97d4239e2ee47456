package faults

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/natstest"
)

// TestLeaderFrozen freezes the leader, a separate process, with SIGSTOP
// for 7s against an election TTL of 3s while ten new clients arrive, and
// lets it run again once a successor serves. The
// frozen leader must not answer anyone with its old term after the
// successor serves, and the capacity in force must stay within capacity.
func TestLeaderFrozen(t *testing.T) {
	t.Parallel()
	const (
		resource = "frozen"
		capacity = 100
		lease    = 4 * time.Second
		freeze   = 7 * time.Second
		// frozenProbes are requests sent while the successor serves and
		// the old leader is still frozen.
		frozenProbes = 6
	)
	srv := natstest.Server(t)
	nc := natstest.Conn(t, srv)
	PutTemplate(t, nc, resource, Template(resource, capacity, lease, time.Second, ""))

	zombie := StartChild(t, srv.ClientURL(), "zombie")
	termA := WaitAnswered(t, nc, 30*time.Second)
	successor := StartReplica(t, srv.ClientURL(), "successor")
	if successor.Status().Serving {
		t.Fatal("the in-process replica serves while the child leads")
	}

	agentsNC := natstest.Conn(t, srv)
	load := StartLoad(t, agentsNC, "old", 10, resource, capacity, 10)
	old, s := load.Agents, load.Sampler

	zombie.Signal(t, syscall.SIGSTOP)
	stoppedAt := time.Now()
	newcomers := StartAgents(t, agentsNC, "new", 10, resource, 10, agent.WithRequestTimeout(5*time.Second))
	s.Add(newcomers...)

	_, termB := WaitServing(t, 2*freeze, successor)
	servedAt := time.Now()
	if termB <= termA {
		t.Fatalf("successor term %d is not above the frozen leader's %d", termB, termA)
	}
	stale := watchStaleTerms(t, append(old, newcomers...), termB, servedAt)
	// While the old leader is still frozen, the successor must get every
	// request: a frozen leader's subscription must not take requests away
	// from it.
	unanswered := AskConcurrently(nc, "frozen-probe", "probe", frozenProbes, 2*time.Second)
	if time.Since(stoppedAt) > freeze {
		t.Logf("leader-frozen: the probes ended after the freeze; they do not show that the successor gets every request")
	}

	time.Sleep(time.Until(stoppedAt.Add(freeze)))
	zombie.Signal(t, syscall.SIGCONT)
	time.Sleep(lease + 2*time.Second) // the scenario's length: every lease the zombie could give runs out

	staleSeen := stale()
	Report(t, "leader-frozen", s.Stop(), fmt.Sprintf("old_term=%d new_term=%d stale_replies_after_successor=%d unanswered_while_frozen=%d/%d", termA, termB, len(staleSeen), len(unanswered), frozenProbes))
	for _, v := range staleSeen {
		t.Errorf("leader-frozen: %s", v)
	}
	if len(unanswered) > 0 {
		t.Errorf("leader-frozen: while the old leader was frozen and the successor served, %d of %d requests were not answered, e.g. %v", len(unanswered), frozenProbes, unanswered[0])
	}
}

// watchStaleTerms polls agents until the returned function is called and
// reports every agent that completed a refresh after since with a term
// below term: a reply of a deposed leader that reached it.
func watchStaleTerms(t *testing.T, agents []*agent.Agent, term uint64, since time.Time) func() []string {
	var (
		mu   sync.Mutex
		seen = map[string]string{}
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	wg.Go(func() {
		for !stop.Load() {
			for _, a := range agents {
				sts := a.Status() // before Term: a newer refresh then shows a newer term
				got := a.Term()
				if len(sts) == 0 || got == 0 || got >= term || !sts[0].LastRefresh.After(since) {
					continue
				}
				mu.Lock()
				if _, ok := seen[a.ClientID()]; !ok {
					seen[a.ClientID()] = fmt.Sprintf("agent %s accepted a reply of term %d granting %g at %s, %s after the successor (term %d) served",
						a.ClientID(), got, sts[0].Granted, sts[0].LastRefresh.Format("15:04:05.000"), sts[0].LastRefresh.Sub(since).Round(time.Millisecond), term)
				}
				mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	done := func() []string {
		stop.Store(true)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		out := make([]string, 0, len(seen))
		for _, v := range seen {
			out = append(out, v)
		}
		return out
	}
	t.Cleanup(func() { done() })
	return done
}
