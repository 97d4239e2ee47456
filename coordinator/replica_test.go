package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/replica"
)

// cutDialer lets a test cut a connection off from NATS and heal it.
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) Dial(network, address string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, errors.New("partitioned")
	}
	c, err := net.DialTimeout(network, address, time.Second)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cutDialer) setCut(cut bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = cut
	if cut {
		for _, c := range d.conns {
			c.Close()
		}
		d.conns = nil
	}
}

type servingEvent struct {
	replica string
	term    uint64
	serving bool
	at      time.Time
}

type replicaRun struct {
	name   string
	nc     *nats.Conn
	dialer *cutDialer
	rep    *coordinator.Replica
	cancel context.CancelFunc
	done   chan error
}

// fleet runs replicas and records when each starts and stops serving.
type fleet struct {
	t      *testing.T
	urls   string
	set    *config.Set
	mu     sync.Mutex
	events []servingEvent
}

func (f *fleet) start(name string) *replicaRun {
	f.t.Helper()
	d := &cutDialer{}
	nc, err := nats.Connect(f.urls, nats.SetCustomDialer(d), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Name(name))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nc.Close)
	rep, err := coordinator.NewReplica(nc, coordinator.ReplicaOptions{
		Options: coordinator.Options{ServerID: name, Templates: sources.StaticTemplates(f.set),
			RoundInterval: 5 * time.Millisecond},
		Election: replica.Election{Replicas: 3, OnServing: func(term uint64, serving bool) {
			f.mu.Lock()
			f.events = append(f.events, servingEvent{name, term, serving, time.Now()})
			f.mu.Unlock()
		}},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replicaRun{name: name, nc: nc, dialer: d, rep: rep, cancel: cancel, done: make(chan error, 1)}
	go func() {
		// Closed after its one value: a replica stopped again (by the
		// test, then by the cleanup) does not wait.
		defer close(r.done)
		r.done <- rep.Run(ctx)
	}()
	f.t.Cleanup(func() { r.stop() })
	return r
}

func (r *replicaRun) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
	}
}

// leader waits until some replica serves a term above after and returns it.
func (f *fleet) leader(after uint64, runs []*replicaRun) (*replicaRun, uint64) {
	f.t.Helper()
	var lead *replicaRun
	var term uint64
	poll.Until(f.t, 30*time.Second, fmt.Sprint("a replica serving a term above ", after), func() bool {
		for _, r := range runs {
			if st := r.rep.Status(); st.Serving && st.Term > after {
				lead, term = r, st.Term
				return true
			}
		}
		return false
	})
	return lead, term
}

// checkHandover asserts that the replica serving term old stopped before
// the one serving term next started.
func (f *fleet) checkHandover(old, next uint64) {
	f.t.Helper()
	var stopped, started time.Time
	poll.For(f.t, 10*time.Second, poll.Interval, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range f.events {
			if e.term == old && !e.serving {
				stopped = e.at
			}
			if e.term == next && e.serving {
				started = e.at
			}
		}
		if stopped.IsZero() || started.IsZero() {
			return fmt.Errorf("term %d stop (%v) or term %d start (%v) not recorded", old, stopped, next, started)
		}
		return nil
	})
	if !stopped.Before(started) {
		f.t.Fatalf("term %d started serving %v before term %d stopped", next, stopped.Sub(started), old)
	}
	f.t.Logf("term %d stopped %v before term %d started", old, started.Sub(stopped).Round(time.Millisecond), next)
}

// clients are simulated agents: each refreshes its lease over NATS,
// reports what it holds, ignores replies of a lower term than it has seen,
// and after every reply the sum of all unexpired leases is checked.
type clients struct {
	t        *testing.T
	capacity float64
	mu       sync.Mutex
	leases   map[string]*allotpb.Lease
	maxTerm  uint64
	maxTotal float64
	over     []string
	answers  []answer
	errs     map[string]int
}

type answer struct {
	client string
	term   uint64
	at     time.Time
	got    float64
}

func (cl *clients) run(ctx context.Context, nc *nats.Conn, id string, wants float64, wg *sync.WaitGroup) {
	wg.Go(func() {
		for ctx.Err() == nil {
			cl.mu.Lock()
			has := cl.leases[id]
			cl.mu.Unlock()
			req := &allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: wants, Has: has}}}
			data, _ := proto.Marshal(req)
			msg := nats.NewMsg(coordinator.Subject("root", "capacity.get"))
			msg.Data = data
			msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
			m, err := nc.RequestMsg(msg, time.Second)
			wait := 100 * time.Millisecond
			var resp allotpb.GetCapacityResponse
			switch {
			case err != nil:
				cl.count(err.Error())
			case m.Header.Get("Nats-Service-Error-Code") != "":
				cl.count(m.Header.Get("Nats-Service-Error"))
			case proto.Unmarshal(m.Data, &resp) != nil || len(resp.GetResponse()) != 1:
				cl.count("bad reply")
			default:
				wait = cl.observe(id, &resp)
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	})
}

func (cl *clients) count(what string) {
	cl.mu.Lock()
	cl.errs[what]++
	cl.mu.Unlock()
}

func (cl *clients) observe(id string, resp *allotpb.GetCapacityResponse) time.Duration {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	now := time.Now()
	if resp.GetTerm() < cl.maxTerm {
		return 100 * time.Millisecond // a deposed leader's answer
	}
	cl.maxTerm = resp.GetTerm()
	lease := resp.GetResponse()[0].GetGets()
	cl.leases[id] = lease
	cl.answers = append(cl.answers, answer{id, resp.GetTerm(), now, lease.GetCapacity()})
	total := 0.0
	for _, l := range cl.leases {
		if l.GetExpiryTime().AsTime().After(now) {
			total += l.GetCapacity()
		}
	}
	cl.maxTotal = max(cl.maxTotal, total)
	if total > cl.capacity*(1+1e-9) {
		cl.over = append(cl.over, fmt.Sprintf("%v: %.3f leased at term %d", now.Format(time.StampMilli), total, resp.GetTerm()))
	}
	return max(lease.GetRefreshInterval().AsDuration(), 50*time.Millisecond)
}

// firstAnswer returns the time of the first answer with a term above
// term after since, or zero.
func (cl *clients) firstAnswer(term uint64, since time.Time) (time.Time, uint64) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, a := range cl.answers {
		if a.term > term && a.at.After(since) {
			return a.at, a.term
		}
	}
	return time.Time{}, 0
}

func (cl *clients) waitAnswer(term uint64, since time.Time) (time.Duration, uint64) {
	cl.t.Helper()
	var at time.Time
	var tm uint64
	poll.Until(cl.t, 30*time.Second, fmt.Sprint("an answer with a term above ", term), func() bool {
		at, tm = cl.firstAnswer(term, since)
		return !at.IsZero()
	})
	return at.Sub(since), tm
}

// waitServed waits until each of ids has had an answer of a term above
// term; with granted, one that granted it capacity.
func (cl *clients) waitServed(term uint64, granted bool, ids ...string) {
	cl.t.Helper()
	poll.Until(cl.t, 30*time.Second, fmt.Sprint(ids, " answered (granted: ", granted, ") in a term above ", term), func() bool {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		served := map[string]bool{}
		for _, a := range cl.answers {
			if a.term > term && (a.got > 0 || !granted) {
				served[a.client] = true
			}
		}
		for _, id := range ids {
			if !served[id] {
				return false
			}
		}
		return true
	})
}

// TestReplicaFailover runs three replicas on a three-server JetStream
// cluster (election and state buckets R3) with simulated clients, and
// goes through an abrupt leader loss, a partitioned leader, a graceful
// handover and a restart of every replica. Throughout, no client-observed
// total of unexpired leases may exceed the capacity; a cut-off leader
// must stop serving before its successor starts; terms only grow.
func TestReplicaFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("three-server cluster failover takes about 30s")
	}
	servers := natstest.Cluster(t, 3)
	tm := tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)
	tm.LeaseLength, tm.RefreshInterval, tm.LearningModeDuration = 6*time.Second, 200*time.Millisecond, 6*time.Second
	f := &fleet{t: t, urls: natstest.ClusterURL(servers), set: config.NewSet(1, []*config.Template{tm}, nil)}
	runs := []*replicaRun{f.start("r0"), f.start("r1"), f.start("r2")}
	lead, term := f.leader(0, runs)
	t.Logf("first leader %s, term %d", lead.name, term)

	cnc, err := nats.Connect(f.urls, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer cnc.Close()
	cl := &clients{t: t, capacity: 100, leases: map[string]*allotpb.Lease{}, errs: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range 3 {
		cl.run(ctx, cnc, fmt.Sprintf("c%d", i), 25, &wg)
	}
	// The leader dies while every client holds a lease of its term.
	cl.waitServed(term-1, true, "c0", "c1", "c2")

	// 1. Abrupt loss: close the leader's connection without resigning. A
	// new client joins at once and must get capacity from the successor
	// without waiting for learning mode to end.
	killed := time.Now()
	lead.nc.Close()
	cl.run(ctx, cnc, "late", 40, &wg)
	d, next := cl.waitAnswer(term, killed)
	t.Logf("abrupt leader loss: first answer of term %d after %v (election TTL 3s)", next, d.Round(time.Millisecond))
	f.checkHandover(term, next)
	lateFirst := time.Duration(0)
	// 45s: on a loaded machine JetStream itself may stall for many seconds
	// (the election bucket timed out while every package's tests ran at
	// once, and in one CI run the successor took 11s to win and then
	// served a newcomer nothing for 22s: it grants a newcomer only once a
	// lease-record write lists it). The figure logged is the one to read.
	granted := poll.Ok(45*time.Second, func() bool {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		for _, a := range cl.answers {
			if a.client == "late" && a.got > 0 {
				lateFirst = a.at.Sub(killed)
				return true
			}
		}
		return false
	})
	t.Logf("new client's first non-zero grant %v after the leader loss (learning mode lasts 6s)", lateFirst.Round(time.Millisecond))
	if !granted {
		t.Error("a new client got nothing for 45s after the failover")
	}
	runs = slicesDelete(runs, lead)
	lead, term = f.leader(term-1, runs)
	if lead.rep.Status().Term != next {
		t.Fatalf("leader %s term %d, clients saw %d", lead.name, lead.rep.Status().Term, next)
	}

	// 2. Partition: cut the leader off from NATS. It must stop serving
	// before the other replica starts.
	cut := time.Now()
	lead.dialer.setCut(true)
	d, next = cl.waitAnswer(term, cut)
	t.Logf("partitioned leader: first answer of term %d after %v", next, d.Round(time.Millisecond))
	f.checkHandover(term, next)
	lead.dialer.setCut(false) // heal: it comes back as a follower
	cutOff := lead
	lead, term = f.leader(term, runs)
	poll.For(t, 10*time.Second, poll.Interval, func() error {
		if st := cutOff.rep.Status(); st.Leader != lead.name || st.Serving {
			return fmt.Errorf("healed replica status %+v, leader %s", st, lead.name)
		}
		return nil
	})

	// 3. Graceful handover: the leader resigns (as on SIGTERM).
	resigned := time.Now()
	lead.stop()
	d, next = cl.waitAnswer(term, resigned)
	t.Logf("graceful handover: first answer of term %d after %v", next, d.Round(time.Millisecond))
	f.checkHandover(term, next)
	runs = slicesDelete(runs, lead)
	_, term = f.leader(term, runs)

	// 4. Restart everything: terms only grow.
	for _, r := range runs {
		r.stop()
	}
	runs = []*replicaRun{f.start("r3"), f.start("r4"), f.start("r5")}
	restarted := time.Now()
	lead, next = f.leader(term, runs)
	d, _ = cl.waitAnswer(term, restarted)
	t.Logf("full restart: %s leads term %d (previous %d); first answer after %v", lead.name, next, term, d.Round(time.Millisecond))
	// Every client has its lease from the new term under the over-grant
	// check (learning mode may grant some nothing yet); then the replicas
	// stop, so that the serving events are all in.
	cl.waitServed(next-1, false, "c0", "c1", "c2", "late")
	for _, r := range runs {
		r.stop()
	}

	f.mu.Lock()
	var last uint64
	for _, e := range f.events {
		if e.serving {
			if e.term <= last {
				t.Errorf("term %d served after term %d", e.term, last)
			}
			last = e.term
		}
	}
	f.mu.Unlock()
	cancel()
	wg.Wait()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	t.Logf("client request failures: %v", cl.errs)
	t.Logf("clients: %d answers, highest observed total of unexpired leases %.3f of capacity 100", len(cl.answers), cl.maxTotal)
	if len(cl.over) > 0 {
		t.Fatalf("over-grant observed %d times, first: %s", len(cl.over), cl.over[0])
	}
}

func slicesDelete(runs []*replicaRun, r *replicaRun) []*replicaRun {
	var out []*replicaRun
	for _, x := range runs {
		if x != r {
			out = append(out, x)
		}
	}
	return out
}
