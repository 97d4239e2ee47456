package election_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/election/electiontest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// clocked is one candidate on a manual clock, with a long TTL so that the
// server never expires its key while the test holds the clock still.
type clocked struct {
	el    *election.Elector
	kv    jetstream.KeyValue
	clock *electiontest.ManualClock
	cfg   election.Config
	won   chan uint64
	ended chan uint64
}

func runClocked(t *testing.T) *clocked {
	t.Helper()
	s := natstest.Server(t)
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	c := &clocked{clock: electiontest.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), won: make(chan uint64, 4), ended: make(chan uint64, 4)}
	c.cfg = election.Config{Key: "root", ID: "a", TTL: 30 * time.Second, Clock: c.clock}
	if c.el, err = election.New(js, c.cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.el.Run(ctx, func(ctx context.Context, term uint64) error {
			c.won <- term
			<-ctx.Done()
			c.ended <- term
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if c.kv, err = election.Bucket(t.Context(), js, election.DefaultBucket, c.cfg.TTL, 1); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *clocked) awaitWin(t *testing.T) uint64 {
	t.Helper()
	select {
	case term := <-c.won:
		return term
	case <-time.After(20 * time.Second):
		t.Fatal("the candidate did not win")
		return 0
	}
}

// awaitRenewalTimer waits until the leader has armed the timer of its
// first renewal, RenewInterval from now: the win is reported before it is
// armed, and a clock moved before would put the renewal a step later.
func (c *clocked) awaitRenewalTimer(t *testing.T, renew time.Duration) {
	t.Helper()
	at := c.clock.Now().Add(renew)
	poll.Until(t, 20*time.Second, "the renewal timer", func() bool { return slices.ContainsFunc(c.clock.Due(), at.Equal) })
}

// revision is the election key's current revision (0 if unreadable).
func (c *clocked) revision(t *testing.T) uint64 {
	e, err := c.kv.Get(t.Context(), c.cfg.Key)
	if err != nil {
		return 0
	}
	return e.Revision()
}

// A leader whose clock passes its deadline without a renewal is no longer
// valid at once, before its renewal loop has run, and then stops leading.
func TestLeadershipLapsesAtTheDeadline(t *testing.T) {
	c := runClocked(t)
	term := c.awaitWin(t)
	if !c.el.Valid(term) {
		t.Fatal("the winner is not valid")
	}
	// TTL − margin (29.5s) passes in one step: no renewal was sent.
	c.clock.Advance(c.cfg.TTL - election.DefaultMargin)
	if c.el.Valid(term) {
		t.Fatal("valid past its deadline")
	}
	select {
	case ended := <-c.ended:
		if ended != term {
			t.Fatalf("term %d ended, want %d", ended, term)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("leadership did not end after its deadline")
	}
	poll.Until(t, 20*time.Second, "the role to become follower", func() bool { return c.el.Status().Role == election.RoleFollower })
}

// A renewal extends validity to its own send time + TTL − margin: past the
// campaign's deadline the renewed leader is still valid.
func TestRenewalExtendsValidityFromItsSendTime(t *testing.T) {
	c := runClocked(t)
	term := c.awaitWin(t)
	renew := min(c.cfg.TTL/3, election.MaxDefaultInterval) // the default RenewInterval
	c.awaitRenewalTimer(t, renew)
	c.clock.Advance(renew)
	poll.Until(t, 20*time.Second, "the renewal to land", func() bool { return c.revision(t) > term })
	first := c.cfg.TTL - election.DefaultMargin
	// One step short of the renewal's deadline, past the campaign's.
	c.clock.Advance(first - time.Millisecond)
	poll.Until(t, 20*time.Second, "validity extended by the renewal", func() bool { return c.el.Valid(term) })
	select {
	case <-c.ended:
		t.Fatal("leadership ended although renewed")
	default:
	}
}

// A leader with a long TTL still renews every second, so that when the
// election stream stops taking writes (its JetStream leader lost: 4–9 s)
// all but about a second of the TTL is left to bridge the gap. It renewed
// every TTL/3, so a 12 s TTL left as little as 7.5 s.
func TestLongTTLRenewsEverySecond(t *testing.T) {
	c := runClocked(t)
	term := c.awaitWin(t)
	c.awaitRenewalTimer(t, election.MaxDefaultInterval)
	c.clock.Advance(election.MaxDefaultInterval)
	poll.Until(t, 20*time.Second, "a renewal one second after the campaign", func() bool { return c.revision(t) > term })
}

// A follower that missed the marker of its leader's key (the watch's
// consumer died with the election stream's leader) campaigns within a
// second, not a TTL: it used to wait a whole TTL after the stream came
// back.
func TestFollowerCampaignsWithinASecondWithoutMarker(t *testing.T) {
	s := natstest.Server(t)
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 30 * time.Second
	kv, err := election.Bucket(t.Context(), js, election.DefaultBucket, ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Create(t.Context(), "root", []byte(`{"id":"gone","nonce":"n","seq":0}`), jetstream.KeyTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	clock := electiontest.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	el, err := election.New(js, election.Config{Key: "root", ID: "b", TTL: ttl, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan uint64, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- el.Run(ctx, func(ctx context.Context, term uint64) error {
			won <- term
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	poll.Until(t, 20*time.Second, "the follower to see the leader", func() bool { return el.Status().Leader == "gone" })
	// The key disappears without a marker the watch would deliver.
	stream, err := js.Stream(t.Context(), "KV_"+election.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(t.Context(), jetstream.WithPurgeSubject("$KV."+election.DefaultBucket+".root")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(election.MaxDefaultInterval)
	select {
	case <-won:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower did not campaign a second after the key was gone")
	}
}
