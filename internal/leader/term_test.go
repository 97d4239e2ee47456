package leader_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// wait bounds the waits of the tests.
const wait = 20 * time.Second

// echo answers with the request's data while the gate is open.
func echo(g *leader.Gate) micro.HandlerFunc {
	return func(m micro.Request) {
		if !g.Open() {
			g.Silenced.Add(1)
			return
		}
		_ = m.Respond(m.Data())
	}
}

func spec(g *leader.Gate, eps ...leader.Endpoint) leader.Spec {
	return leader.Spec{Name: "leader-test", Version: "1.2.3", Description: "a test", Node: "n1", ServerID: "s1", Term: 7,
		Partition: 2, Partitions: 4, Gate: g, Endpoints: eps, Stats: func() any { return map[string]int{"x": 1} }}
}

func startTerm(t *testing.T, nc *nats.Conn, sp leader.Spec) *leader.Term {
	t.Helper()
	term, err := leader.Start(t.Context(), nc, sp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(term.Stop)
	return term
}

// A term registers its micro service with the common metadata and its
// endpoints without queue groups, and serves them and its plain
// subscriptions as soon as Start returns.
func TestTermServes(t *testing.T) {
	s := natstest.Server(t)
	g := leader.NewGate(nil, nil, "test")
	startTerm(t, natstest.Conn(t, s), spec(g,
		leader.Endpoint{Name: "echo", Subject: "test.echo", Handle: echo(g)},
		leader.Endpoint{Subject: "test.raw.*", Plain: true, Handle: func(m micro.Request) { _ = m.Respond([]byte(m.(*leader.Request).Msg().Subject)) }}))
	cl := natstest.Conn(t, s)
	if m, err := cl.Request("test.echo", []byte("hi"), wait); err != nil || string(m.Data) != "hi" {
		t.Fatalf("echo: %v %v", m, err)
	}
	if m, err := cl.Request("test.raw.a", nil, wait); err != nil || string(m.Data) != "test.raw.a" {
		t.Fatalf("raw: %v %v", m, err)
	}
	var info micro.Info
	request(t, cl, "$SRV.INFO.leader-test", &info)
	want := map[string]string{"node": "n1", "server_id": "s1", "term": "7", "partition": "2", "partitions": "4"}
	if info.Version != "1.2.3" || info.Description != "a test" || !maps.Equal(info.Metadata, want) {
		t.Fatalf("info %+v", info)
	}
	if len(info.Endpoints) != 1 {
		t.Fatalf("endpoints %+v: want the micro one only", info.Endpoints)
	}
	ep := info.Endpoints[0]
	if ep.Name != "echo" || ep.Subject != "test.echo" || ep.QueueGroup != "" || !maps.Equal(ep.Metadata, map[string]string{"node": "n1", "partition": "2"}) {
		t.Fatalf("endpoint %+v", ep)
	}
	var stats micro.Stats
	request(t, cl, "$SRV.STATS.leader-test", &stats)
	if len(stats.Endpoints) != 1 || string(stats.Endpoints[0].Data) != `{"x":1}` || stats.Endpoints[0].NumRequests != 1 {
		t.Fatalf("stats %+v", stats.Endpoints)
	}
}

// Without partitions (a coordinator) the metadata has none.
func TestTermWithoutPartitions(t *testing.T) {
	s := natstest.Server(t)
	sp := spec(nil, leader.Endpoint{Name: "e", Subject: "test.e", Handle: func(m micro.Request) { _ = m.Respond(nil) }})
	sp.Partitions = 0
	startTerm(t, natstest.Conn(t, s), sp)
	var info micro.Info
	request(t, natstest.Conn(t, s), "$SRV.INFO.leader-test", &info)
	if !maps.Equal(info.Metadata, map[string]string{"node": "n1", "server_id": "s1", "term": "7"}) ||
		!maps.Equal(info.Endpoints[0].Metadata, map[string]string{"node": "n1"}) {
		t.Fatalf("info %+v", info)
	}
}

func request(t *testing.T, nc *nats.Conn, subject string, v any) {
	t.Helper()
	m, err := nc.Request(subject, nil, wait)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		t.Fatalf("%s: %v", m.Data, err)
	}
}

// Once the validity lapses, the term's gate withholds the reply and the
// term reports why it stopped serving.
func TestTermLapsedValiditySilences(t *testing.T) {
	s := natstest.Server(t)
	var valid atomic.Bool
	valid.Store(true)
	g := leader.NewGate(valid.Load, nil, "test")
	term := startTerm(t, natstest.Conn(t, s), spec(g, leader.Endpoint{Name: "echo", Subject: "test.echo", Handle: echo(g)}))
	cl := natstest.Conn(t, s)
	if _, err := cl.Request("test.echo", nil, wait); err != nil {
		t.Fatal(err)
	}
	valid.Store(false)
	inbox := nats.NewInbox()
	var replies atomic.Int64
	if _, err := cl.Subscribe(inbox, func(*nats.Msg) { replies.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := cl.PublishRequest("test.echo", inbox, nil); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, wait, "the reply to be withheld", func() bool { return g.Silenced.Load() == 1 })
	select {
	case <-term.Done():
	default:
		t.Fatal("Done not closed")
	}
	if !errors.Is(term.Err(), leader.ErrLapsed) {
		t.Fatalf("err %v", term.Err())
	}
	term.Stop()
	if err := cl.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := replies.Load(); n != 0 {
		t.Fatalf("%d replies from a lapsed leader", n)
	}
}

// Stop returns once every request delivered before it has been handled:
// answered by its handler, or queued and answered by the product's Close,
// on micro endpoints and plain subscriptions alike.
func TestStopAnswersEveryDeliveredRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		eps  func(g *leader.Gate, queue func(reply string)) []leader.Endpoint
	}{
		{"micro endpoint", func(g *leader.Gate, _ func(string)) []leader.Endpoint {
			return []leader.Endpoint{{Name: "echo", Subject: "test.req", Handle: func(m micro.Request) {
				busy()
				echo(g)(m)
			}}}
		}},
		{"queued for close", func(g *leader.Gate, queue func(string)) []leader.Endpoint {
			return []leader.Endpoint{{Name: "queue", Subject: "test.req", Handle: func(m micro.Request) {
				busy()
				queue(m.Reply())
			}}}
		}},
		{"plain subscription", func(g *leader.Gate, _ func(string)) []leader.Endpoint {
			return []leader.Endpoint{{Subject: "test.req", Plain: true, Handle: func(m micro.Request) {
				busy()
				if g.Open() {
					_ = m.Respond(nil)
				}
			}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			g := leader.NewGate(nil, nil, "test")
			var mu sync.Mutex
			var queued []string
			queue := func(reply string) {
				mu.Lock()
				queued = append(queued, reply)
				mu.Unlock()
			}
			sp := spec(g, tc.eps(g, queue)...)
			sp.Close = func() {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range queued {
					if g.Open() {
						_ = nc.Publish(r, nil)
					}
				}
			}
			term := startTerm(t, nc, sp)
			const n = 1000
			got := sendRequests(t, s, "test.req", n)
			// Stop once all have reached the service's connection (nothing
			// else is sent to it).
			poll.Until(t, wait, "the requests to reach the service", func() bool { return nc.Stats().InMsgs >= n })
			term.Stop()
			if d, h := term.Counts(); d != n || h != n {
				t.Fatalf("delivered %d, handled %d; want %d", d, h, n)
			}
			poll.Until(t, wait, fmt.Sprint("all ", n, " answers"), func() bool { return got.Load() == n })
		})
	}
}

// busy makes a handler slow enough that requests wait in the
// subscription's queue when Stop begins.
func busy() { time.Sleep(20 * time.Microsecond) }

// sendRequests publishes n requests to subject with one reply inbox and
// returns the count of answers received.
func sendRequests(t *testing.T, s *server.Server, subject string, n int) *atomic.Int64 {
	t.Helper()
	cl := natstest.Conn(t, s)
	inbox := nats.NewInbox()
	var got atomic.Int64
	if _, err := cl.Subscribe(inbox, func(*nats.Msg) { got.Add(1) }); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := cl.PublishRequest(subject, inbox, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Flush(); err != nil {
		t.Fatal(err)
	}
	return &got
}

// The tick runs every TickEvery until Stop, and not after it.
func TestTermTicks(t *testing.T) {
	s := natstest.Server(t)
	var ticks atomic.Int64
	var stopped atomic.Bool
	sp := spec(nil)
	sp.TickEvery = time.Millisecond
	sp.Tick = func() {
		if stopped.Load() {
			t.Error("tick after Stop")
		}
		ticks.Add(1)
	}
	term := startTerm(t, natstest.Conn(t, s), sp)
	poll.Until(t, wait, "three ticks", func() bool { return ticks.Load() >= 3 })
	term.Stop()
	stopped.Store(true)
}

// Start refuses a negative tick and cleans up after a subject it cannot
// subscribe to.
func TestStartErrors(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	sp := spec(nil)
	sp.TickEvery = -time.Second
	if _, err := leader.Start(t.Context(), nc, sp); err == nil {
		t.Fatal("negative tick accepted")
	}
	sp = spec(nil, leader.Endpoint{Name: "ok", Subject: "test.ok", Handle: func(micro.Request) {}},
		leader.Endpoint{Name: "bad", Subject: "test..bad", Handle: func(micro.Request) {}})
	if _, err := leader.Start(t.Context(), nc, sp); err == nil {
		t.Fatal("an invalid subject accepted")
	}
	if _, err := nc.Request("test.ok", nil, wait); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("the endpoint registered before the failure still answers: %v", err)
	}
}

// A drain that stalls (a handler that does not return) ends after
// StopGrace instead of holding Stop forever.
func TestStopEndsWhenTheDrainStalls(t *testing.T) {
	s := natstest.Server(t)
	release := make(chan struct{})
	defer close(release)
	term := startTerm(t, natstest.Conn(t, s), spec(nil, leader.Endpoint{Name: "stuck", Subject: "test.stuck", Handle: func(micro.Request) { <-release }}))
	if err := natstest.Conn(t, s).PublishRequest("test.stuck", nats.NewInbox(), nil); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, wait, "the request to be taken up", func() bool { d, _ := term.Counts(); return d == 1 })
	term.Stop()
	if d, h := term.Counts(); d != 1 || h != 0 {
		t.Fatalf("delivered %d, handled %d", d, h)
	}
}

// A leader whose validity lapsed does not wait for its drain: what it
// would handle now it could not answer.
func TestStopOfALapsedTermDoesNotWait(t *testing.T) {
	s := natstest.Server(t)
	var valid, over atomic.Bool
	var calls atomic.Int64
	valid.Store(true)
	defer over.Store(true)
	g := leader.NewGate(valid.Load, nil, "test")
	// A long backlog that keeps being handled: a drain that waited for it
	// would take minutes, and never stall.
	sp := spec(g, leader.Endpoint{Name: "slow", Subject: "test.slow", Handle: func(micro.Request) {
		calls.Add(1)
		if !over.Load() {
			time.Sleep(5 * time.Millisecond)
		}
	}})
	const n = 20000
	sp.Limits.MaxInFlight = 2 * n
	nc := natstest.Conn(t, s)
	term := startTerm(t, nc, sp)
	sendRequests(t, s, "test.slow", n)
	poll.Until(t, wait, "the backlog to reach the service", func() bool { return nc.Stats().InMsgs >= n })
	valid.Store(false)
	stopped := make(chan struct{})
	go func() { term.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(wait):
		t.Fatal("Stop of a lapsed term waited for its backlog")
	}
	if c := calls.Load(); c >= n {
		t.Fatalf("all %d requests were handled before Stop returned", c)
	}
	if !errors.Is(term.Err(), leader.ErrLapsed) {
		t.Fatalf("err %v", term.Err())
	}
}

// A handler's error reply is counted in the intake's errors, on a micro
// endpoint and a plain one alike, and reaches the caller with micro's
// error headers.
func TestTermCountsErrorReplies(t *testing.T) {
	s := natstest.Server(t)
	bad := func(m micro.Request) { _ = m.Error("400", "bad request", []byte(`{"code":400}`)) }
	term := startTerm(t, natstest.Conn(t, s), spec(nil,
		leader.Endpoint{Name: "bad", Subject: "test.bad", Handle: bad},
		leader.Endpoint{Subject: "test.plain", Plain: true, Handle: bad}))
	cl := natstest.Conn(t, s)
	for _, subject := range []string{"test.bad", "test.plain", "test.bad"} {
		m, err := cl.Request(subject, nil, wait)
		if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "400" || m.Header.Get(micro.ErrorHeader) != "bad request" {
			t.Fatalf("%s: %v %v", subject, m, err)
		}
	}
	poll.Until(t, wait, "three requests handled", func() bool { _, h := term.Counts(); return h == 3 })
	if st := term.Intake(); st.Errors != 3 || st.InFlight != 0 {
		t.Fatalf("intake %+v, want 3 errors", st)
	}
}
