package election_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/netcut"
	"github.com/allot/allot/internal/poll"
)

// candidate runs one Elector on its own connection and records its terms.
type candidate struct {
	id     string
	nc     *nats.Conn
	el     *election.Elector
	cancel context.CancelFunc
	done   chan error
	once   sync.Once

	mu      sync.Mutex
	leading bool
	terms   []uint64
	won     chan uint64
}

func runCandidate(t *testing.T, nc *nats.Conn, id string) *candidate {
	t.Helper()
	return runCandidateLog(t, nc, id, nil)
}

// runCandidateLog is runCandidate logging to log (nil: slog.Default()).
func runCandidateLog(t *testing.T, nc *nats.Conn, id string, log *slog.Logger) *candidate {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	el, err := election.New(js, election.Config{Key: "root", ID: id, TTL: 2 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{id: id, nc: nc, el: el, cancel: cancel, done: make(chan error, 1), won: make(chan uint64, 10)}
	go func() {
		c.done <- el.Run(ctx, func(ctx context.Context, term uint64) error {
			c.mu.Lock()
			c.leading = true
			c.terms = append(c.terms, term)
			c.mu.Unlock()
			c.won <- term
			<-ctx.Done()
			c.mu.Lock()
			c.leading = false
			c.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *candidate) stop(t *testing.T) {
	c.cancel()
	c.once.Do(func() {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Run did not return", c.id)
		}
	})
}

// waitWinner returns the first candidate to win after since.
func waitWinner(t *testing.T, cs ...*candidate) (*candidate, uint64) {
	t.Helper()
	cases := time.After(15 * time.Second)
	for {
		for _, c := range cs {
			select {
			case term := <-c.won:
				return c, term
			default:
			}
		}
		select {
		case <-cases:
			t.Fatal("no candidate won within 15s")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestElectionHandoverAndExpiry(t *testing.T) {
	s := natstest.Server(t)
	a := runCandidate(t, natstest.Conn(t, s), "a")
	first, term1 := waitWinner(t, a)
	if first != a || term1 == 0 {
		t.Fatalf("a did not win: %v %d", first.id, term1)
	}
	b := runCandidate(t, natstest.Conn(t, s), "b")
	// b follows and learns the leader.
	poll.For(t, 30*time.Second, poll.Interval, func() error {
		if st := b.el.Status(); st.Leader != "a" {
			return fmt.Errorf("b status %+v", st)
		}
		return nil
	})
	// a stays leader across more renewals than fit in a TTL (2s, a
	// renewal every 2s/3): each renewal is a new revision of the key.
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), election.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	revision := func() uint64 {
		e, err := kv.Get(t.Context(), "root")
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	won := revision()
	poll.Until(t, 30*time.Second, "four renewals by a", func() bool { return revision() >= won+4 })
	if st := a.el.Status(); st.Role != election.RoleLeader || st.Term != term1 || len(b.won) != 0 {
		t.Fatalf("a lost leadership without cause: %+v; b won %d times", st, len(b.won))
	}

	// Graceful: a resigns, b takes over at once.
	start := time.Now()
	a.stop(t)
	w, term2 := waitWinner(t, b)
	t.Logf("graceful handover: %v", time.Since(start))
	if w != b || term2 <= term1 {
		t.Fatalf("after resignation %s won term %d (previous %d)", w.id, term2, term1)
	}

	// Abrupt: b's connection closes without resigning; c wins after TTL.
	c := runCandidate(t, natstest.Conn(t, s), "c")
	poll.Until(t, 30*time.Second, "c to follow b", func() bool { return c.el.Status().Leader == "b" })
	start = time.Now()
	b.nc.Close()
	w, term3 := waitWinner(t, c)
	t.Logf("abrupt loss (TTL 2s): %v", time.Since(start))
	if w != c || term3 <= term2 {
		t.Fatalf("after abrupt loss %s won term %d (previous %d)", w.id, term3, term2)
	}
	// b's Run ended (connection closed) and b stopped leading.
	b.once.Do(func() {
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			t.Fatal("b's Run did not return after its connection closed")
		}
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leading {
		t.Fatal("b still leading")
	}
}

func TestBucketRejectsWrongConfig(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "plain", History: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := election.Bucket(ctx, js, "plain", time.Second, 1); err == nil {
		t.Fatal("a bucket without limit marker TTL was accepted")
	}
	if _, err := election.Bucket(ctx, js, "fresh", 3*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := election.New(js, election.Config{Key: "k", ID: "x", TTL: 1500 * time.Millisecond}); err == nil {
		t.Fatal("fractional TTL accepted")
	}
}

// TestFollowerWatchesAgain: a leader whose connection is cut loses its
// leadership and watches the key again while not connected; that watch
// fails once its request times out. Once connected again, following the
// other candidate that won meanwhile, it watches the key again (a
// consumer of the election stream made after the cut ends) rather than
// campaigning periodically for good.
func TestFollowerWatchesAgain(t *testing.T) {
	s := natstest.Server(t)
	relay, err := netcut.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Close() })
	ncA, err := nats.Connect("nats://"+relay.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ncA.Close)
	logA := &lines{}
	a := runCandidateLog(t, ncA, "a", slog.New(slog.NewTextHandler(logA, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if w, _ := waitWinner(t, a); w != a {
		t.Fatal("a did not win alone")
	}
	b := runCandidate(t, natstest.Conn(t, s), "b")
	relay.Cut()
	if w, _ := waitWinner(t, b); w != b {
		t.Fatal("b did not take over")
	}
	logA.waitFor(t, "cannot watch election key")
	restored := time.Now()
	relay.Restore()
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		if st, err := js.Stream(ctx, "KV_"+election.DefaultBucket); err == nil {
			for info := range st.ListConsumers(ctx).Info() {
				if info.Created.After(restored) && info.PushBound {
					logA.waitFor(t, "watching election key again")
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("a never watched the key again; its log:\n%s", strings.Join(logA.all(), "\n"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lines keeps log output by line.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.l = append(l.l, string(p))
	l.mu.Unlock()
	return len(p), nil
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

// waitFor waits for a line containing part.
func (l *lines) waitFor(t *testing.T, part string) {
	t.Helper()
	poll.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		all := l.all()
		for _, line := range all {
			if strings.Contains(line, part) {
				return nil
			}
		}
		return fmt.Errorf("no log line with %q:\n%s", part, strings.Join(all, "\n"))
	})
}
