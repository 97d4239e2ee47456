package coordinator

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Every term's coordinator gets the options as given: NoRoundInterval
// and NoClockSkew are not read as "default" by the second fill that New
// does, and the server id stays the one the replica picked.
func TestReplicaTermsKeepExplicitNones(t *testing.T) {
	nc := new(nats.Conn) // New only keeps it
	r, err := NewReplica(nc, ReplicaOptions{Options: Options{RoundInterval: NoRoundInterval, ClockSkew: NoClockSkew}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(nc, r.termOptions(nil, 3))
	if err != nil {
		t.Fatal(err)
	}
	if c.round != 0 || c.opts.ClockSkew != 0 || c.Term() != 3 || c.opts.ServerID != r.opts.ServerID || r.opts.ServerID == "" {
		t.Fatalf("round %v, clock skew %v, term %d, server id %q (replica's %q)", c.round, c.opts.ClockSkew, c.Term(), c.opts.ServerID, r.opts.ServerID)
	}
}

// The default round interval is 0: a round takes what queued while the
// previous one ran (a round costs O(log n) per client that asked, so an
// interval only adds latency). A set interval is kept.
func TestDefaultRoundAnswersAtOnce(t *testing.T) {
	nc := new(nats.Conn)
	for _, tc := range []struct {
		set, want time.Duration
	}{{0, 0}, {NoRoundInterval, 0}, {20 * time.Millisecond, 20 * time.Millisecond}} {
		c, err := New(nc, Options{RoundInterval: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		if c.round != tc.want {
			t.Errorf("RoundInterval %v: round %v, want %v", tc.set, c.round, tc.want)
		}
	}
}
