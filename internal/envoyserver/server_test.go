package envoyserver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/envoywire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/replica"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runReplica runs a replica of partition p of n until the test ends or
// the returned stop is called. Its seat lasts 30s: no test here waits for
// one to expire (a stopped replica resigns), and a leader whose renewal
// comes late on a loaded machine must not lose it mid-test.
func runReplica(t testing.TB, nc *nats.Conn, id string, p, n, maxCounters int) (*envoyserver.Replica, func()) {
	t.Helper()
	r, err := envoyserver.NewReplica(nc, envoyserver.ReplicaOptions{
		Options:  envoyserver.Options{ServerID: id, Partition: p, Partitions: n, MaxCounters: maxCounters, Logger: quiet()},
		Election: replica.Election{TTL: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil && ctx.Err() == nil {
			t.Logf("replica %s: %v", id, err)
		}
	}()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return r, stop
}

func waitServing(t testing.TB, rs ...*envoyserver.Replica) {
	t.Helper()
	for _, r := range rs {
		poll.Until(t, 10*time.Second, fmt.Sprintf("envoy partition %d to serve", r.Partition()), r.Serving)
	}
}

func inc(domain, key string, hits uint64, expires time.Time) envoyrl.Increment {
	return envoyrl.Increment{Key: key, Hits: hits, Expires: expires, Domain: domain}
}

// request sends body to subject as JSON and returns the reply and its
// error code ("" for none).
func request(t *testing.T, nc *nats.Conn, subject, body string) (string, string) {
	t.Helper()
	m, err := nc.Request(subject, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return string(m.Data), m.Header.Get("Nats-Service-Error-Code")
}

// TestCountOverNATS counts through the one partition's leader, in JSON as
// the nats CLI sends it and in binary through a Router, and checks that
// bad requests are refused and change nothing.
func TestCountOverNATS(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	r, _ := runReplica(t, nc, "a", 0, 1, 3)
	waitServing(t, r)
	exp := time.Now().Add(time.Hour).Unix()
	subj := envoywire.CountSubject("root", "edge")
	body := fmt.Sprintf(`{"domain":"edge","counters":[{"key":"edge_k_v_0","hits":2,"expires":%d},{"key":"edge_k_v_0","hits":1,"expires":%d}]}`, exp, exp)
	// protojson varies its spacing on purpose: compare without it.
	if got, code := request(t, nc, subj, body); code != "" || strings.ReplaceAll(got, " ", "") != `{"values":["2","3"]}` {
		t.Fatalf("count: %s (code %q)", got, code)
	}
	router, err := envoyserver.NewRouter(natstest.Conn(t, s), envoyserver.RouterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	vals, err := router.Increment(ctx, now, []envoyrl.Increment{inc("edge", "edge_k_v_0", 4, time.Unix(exp, 0))})
	if err != nil || vals[0] != 7 {
		t.Fatalf("router: %v, %v", vals, err)
	}
	if vals, err := router.Get(ctx, now, []envoyrl.Increment{inc("edge", "edge_k_v_0", 9, time.Unix(exp, 0))}); err != nil || vals[0] != 7 {
		t.Fatalf("read: %v, %v", vals, err)
	}

	for _, tc := range []struct{ name, subject, body, code, want string }{
		{"another domain's token", envoywire.CountSubject("root", "api"), body, "400", `is counted on token`},
		{"malformed", subj, `{"domain":`, "400", "cannot decode"},
		{"overflow", subj, fmt.Sprintf(`{"domain":"edge","counters":[{"key":"edge_k_v_0","hits":"9223372036854775807","expires":%d}]}`, exp), "409", "would overflow"},
		{"full", subj, fmt.Sprintf(`{"domain":"edge","counters":[{"key":"n1","hits":1,"expires":%d},{"key":"n2","hits":1,"expires":%d},{"key":"n3","hits":1,"expires":%d}]}`, exp, exp, exp), "429", "keeps its most counters (3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := request(t, nc, tc.subject, tc.body)
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Fatalf("got %s (code %q), want code %s with %q", got, code, tc.code, tc.want)
			}
		})
	}
	if vals, _ := router.Get(ctx, now, []envoyrl.Increment{inc("edge", "edge_k_v_0", 0, time.Unix(exp, 0))}); vals[0] != 7 {
		t.Fatalf("after refused requests the counter is %d, want 7", vals[0])
	}
	var ce *envoyserver.CountError
	if _, err := router.Increment(ctx, now, []envoyrl.Increment{inc("edge", "x1", 1, time.Unix(exp, 0)), inc("edge", "x2", 1, time.Unix(exp, 0)), inc("edge", "x3", 1, time.Unix(exp, 0))}); !errors.As(err, &ce) || ce.Code != envoywire.CodeTooMany {
		t.Fatalf("router past the bound: %v", err)
	}
	st := r.Server().Stats()
	if st.Counters != 1 || st.Hits != 7 || st.Full != 2 || st.Overflows != 1 || !st.Serving {
		t.Errorf("stats %+v", st)
	}
}

// TestRouterAnswersInProcess: beside the partition's leader the Router
// counts without NATS, on the same counters as requests over NATS; once
// that leader stops it counts over NATS at the new one.
func TestRouterAnswersInProcess(t *testing.T) {
	const n = 2
	srv, err := embed.Start(embed.Options{StoreDir: t.TempDir(), Mappings: envoywire.Mappings("root", n)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	here := []*envoyserver.Replica{nil, nil}
	var stopHere []func()
	for p := range n {
		r, stop := runReplica(t, natstest.Conn(t, srv), fmt.Sprintf("here-%d", p), p, n, 0)
		waitServing(t, r)
		here[p], stopHere = r, append(stopHere, stop)
	}
	local := func(p int) *envoyserver.Server { return here[p].Server() }
	inProcess, err := envoyserver.NewRouter(natstest.Conn(t, srv), envoyserver.RouterOptions{Partitions: n, Local: local})
	if err != nil {
		t.Fatal(err)
	}
	remote, err := envoyserver.NewRouter(natstest.Conn(t, srv), envoyserver.RouterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, now, exp := context.Background(), time.Now(), time.Now().Add(time.Hour)
	for _, domain := range []string{"edge", "api", "a.b", "x", "y", "z"} {
		want := uint64(0)
		for i := range 4 {
			router := inProcess
			if i%2 == 1 {
				router = remote
			}
			vals, err := router.Increment(ctx, now, []envoyrl.Increment{inc(domain, domain+"_k", 1, exp)})
			want++
			if err != nil || vals[0] != want {
				t.Fatalf("%s, count %d: %v, %v; want %d", domain, i, vals, err, want)
			}
		}
	}
	var local0, remote0 uint64
	for p := range n {
		st := here[p].Server().Stats()
		local0, remote0 = local0+st.Local, remote0+st.Requests
	}
	if local0 != 12 || remote0 != 12 {
		t.Errorf("%d counted in process and %d over NATS, want 12 each", local0, remote0)
	}

	// A follower of partition 0 elsewhere takes over when this process's
	// leader stops; the in-process Router then counts over NATS, and the
	// new leader starts without the old one's counters.
	p := envoywire.Partition("edge", n)
	other, _ := runReplica(t, natstest.Conn(t, srv), "elsewhere", p, n, 0)
	stopHere[p]()
	waitServing(t, other)
	vals, err := inProcess.Increment(ctx, now, []envoyrl.Increment{inc("edge", "edge_k", 1, exp)})
	if err != nil || vals[0] != 1 {
		t.Fatalf("after the failover: %v, %v", vals, err)
	}
	if st := other.Server().Stats(); st.Requests != 1 || st.Local != 0 {
		t.Errorf("the new leader's stats %+v", st)
	}
}

// TestNoPartition: with no leader a count fails at once, naming why.
func TestNoPartition(t *testing.T) {
	s := natstest.Server(t)
	router, err := envoyserver.NewRouter(natstest.Conn(t, s), envoyserver.RouterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = router.Increment(context.Background(), time.Now(), []envoyrl.Increment{inc("edge", "k", 1, time.Now().Add(time.Hour))})
	if !errors.Is(err, envoyserver.ErrNoPartition) {
		t.Fatalf("got %v, want ErrNoPartition", err)
	}
}

// TestClockSkew: a leader whose clock runs ahead of a front end's by
// less than the clock skew still counts on the front end's window; with
// no skew allowed the window has ended for it, and every hit would start
// the counter again.
func TestClockSkew(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	windowEnd := time.Unix(1_800_000_001, 0)
	for _, tc := range []struct {
		skew time.Duration
		want string
	}{{envoyserver.DefaultClockSkew, "2"}, {envoyserver.NoClockSkew, "1"}} {
		srv, err := envoyserver.New(nc, envoyserver.Options{ClockSkew: tc.skew, Logger: quiet(),
			Now: func() time.Time { return windowEnd.Add(time.Second) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"domain":"edge","counters":[{"key":"edge_k_v_1800000000","hits":1,"expires":%d}]}`, windowEnd.Unix())
		request(t, nc, envoywire.CountSubject("root", "edge"), body)
		got, _ := request(t, nc, envoywire.CountSubject("root", "edge"), body)
		srv.Stop()
		if !strings.Contains(got, `"`+tc.want+`"`) {
			t.Errorf("skew %v: the second hit reads %s, want %s", tc.skew, got, tc.want)
		}
	}
}

// TestReplicaClockSkew: a replica's terms count with the clock skew it
// was given, as a lone server does (TestClockSkew): with NoClockSkew, the
// one `allot up --clock-skew 0` gives, a window that has ended on the
// leader's clock starts its counter again. Each term's server fills the
// options again, and must not read the 0 that NoClockSkew became as the
// default.
func TestReplicaClockSkew(t *testing.T) {
	t.Parallel()
	windowEnd := time.Unix(1_800_000_001, 0)
	for _, tc := range []struct {
		skew time.Duration
		want string
	}{{0, "2"}, {envoyserver.NoClockSkew, "1"}} {
		s := natstest.Server(t)
		nc := natstest.Conn(t, s)
		r, err := envoyserver.NewReplica(nc, envoyserver.ReplicaOptions{
			Options: envoyserver.Options{ServerID: "e1", ClockSkew: tc.skew, Logger: quiet(),
				Now: func() time.Time { return windowEnd.Add(time.Second) }},
			Election: replica.Election{TTL: 30 * time.Second}, // as runReplica's
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		waitServing(t, r)
		body := fmt.Sprintf(`{"domain":"edge","counters":[{"key":"edge_k_v_1800000000","hits":1,"expires":%d}]}`, windowEnd.Unix())
		request(t, nc, envoywire.CountSubject("root", "edge"), body)
		got, _ := request(t, nc, envoywire.CountSubject("root", "edge"), body)
		cancel()
		<-done
		if !strings.Contains(got, `"`+tc.want+`"`) {
			t.Errorf("replica with skew %v: the second hit reads %s, want %s", tc.skew, got, tc.want)
		}
	}
}

// TestElectionOnItsOwnConnection: the partition's election keep-alives go
// out on a connection of their own, as the other services' do, so that a
// flood of count requests on the replica's connection cannot queue them
// until the leadership lapses.
func TestElectionOnItsOwnConnection(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s, nats.Name("envoy"))
	r, _ := runReplica(t, nc, "e1", 0, 1, 100)
	waitServing(t, r)
	if out := nc.Stats().OutMsgs; out != 0 {
		t.Fatalf("the replica's connection sent %d messages for the election", out)
	}
}
