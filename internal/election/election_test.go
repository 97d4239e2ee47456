package election_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/natstest"
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
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	el, err := election.New(js, election.Config{Key: "root", ID: id, TTL: 2 * time.Second})
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
	deadline := time.Now().Add(5 * time.Second)
	for b.el.Status().Leader != "a" {
		if time.Now().After(deadline) {
			t.Fatalf("b status %+v", b.el.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// a stays leader across several renewals (TTL 2s).
	time.Sleep(3 * time.Second)
	if st := a.el.Status(); st.Role != election.RoleLeader || st.Term != term1 {
		t.Fatalf("a lost leadership without cause: %+v", st)
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
	time.Sleep(200 * time.Millisecond)
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
