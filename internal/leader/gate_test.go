package leader_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/allot/allot/internal/leader"
)

// A gate on a validity deadline opens until the deadline and fails for
// good once it has passed, even if the validity came back.
func TestGateLapsesAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deadline := time.Now().Add(3 * time.Second)
		renewed := false
		g := leader.NewGate(func() bool { return renewed || time.Now().Before(deadline) }, nil, "test")
		if !g.Open() || !g.Serving() || g.Err() != nil {
			t.Fatal("a fresh gate is not open")
		}
		time.Sleep(3*time.Second - time.Nanosecond)
		if !g.Open() {
			t.Fatal("closed before its deadline")
		}
		select {
		case <-g.Done():
			t.Fatal("Done before the deadline")
		default:
		}
		time.Sleep(time.Nanosecond)
		if g.Open() {
			t.Fatal("open at its deadline")
		}
		if !errors.Is(g.Err(), leader.ErrLapsed) || g.Serving() {
			t.Fatalf("err %v, serving %v", g.Err(), g.Serving())
		}
		<-g.Done()
		renewed = true // too late: a lapsed leader may have been succeeded
		if g.Open() {
			t.Fatal("a lapsed gate opened again")
		}
	})
}

func TestGateStates(t *testing.T) {
	deposed := errors.New("deposed")
	for _, tc := range []struct {
		name        string
		act         func(g *leader.Gate)
		open, serve bool
		err         error
		done        bool
	}{
		{"fresh", func(*leader.Gate) {}, true, true, nil, false},
		{"closed", func(g *leader.Gate) { g.Close() }, false, false, nil, false},
		{"failed", func(g *leader.Gate) { g.Fail(deposed) }, false, false, deposed, true},
		{"first failure kept", func(g *leader.Gate) { g.Fail(deposed); g.Fail(leader.ErrLapsed) }, false, false, deposed, true},
		{"failed then closed", func(g *leader.Gate) { g.Fail(deposed); g.Close() }, false, false, deposed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := leader.NewGate(nil, nil, "test")
			tc.act(g)
			if g.Open() != tc.open || g.Serving() != tc.serve || !errors.Is(g.Err(), tc.err) {
				t.Fatalf("open %v serving %v err %v", g.Open(), g.Serving(), g.Err())
			}
			select {
			case <-g.Done():
				if !tc.done {
					t.Fatal("Done closed")
				}
			default:
				if tc.done {
					t.Fatal("Done not closed")
				}
			}
		})
	}
}
