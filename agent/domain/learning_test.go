package domain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// These tests drive holds through a leader change in which the agent
// uses a hold before its first refresh has reached the new leader: the
// new leader does not know the hold yet, and must neither make the agent
// forget copies it still holds nor mark a live hold lost.

// learningTTL is long enough that the agent's first refresh to the new
// leader (a third of it after the reserve) comes well after the call
// under test, and short enough to keep the tests quick.
const learningTTL = 1500 * time.Millisecond

// holdAcrossLeaderChange reserves 4 copies of app:sandbox, then replaces
// the leader with a new one that learns; the hold's first refresh to it
// is due a third of learningTTL after the reserve.
func holdAcrossLeaderChange(t *testing.T) (*Hold, *domainserver.Server) {
	t.Helper()
	s := natstest.Server(t)
	old := startDomainServer(t, s, learningTTL, false)
	a := newClient(t, natstest.Conn(t, s), "a")
	h, err := a.Reserve(context.Background(), "app:sandbox", "acme", 4)
	if err != nil {
		t.Fatal(err)
	}
	old.Stop()
	return h, startDomainServer(t, s, learningTTL, true)
}

// TestPartialReleaseWhileLearningKeepsTheRest: a partial release of a
// hold the new leader has not heard of yet leaves the rest held, by the
// agent and, after the next refresh, by the new leader.
func TestPartialReleaseWhileLearningKeepsTheRest(t *testing.T) {
	t.Parallel()
	h, srv := holdAcrossLeaderChange(t)
	ctx := context.Background()
	if err := h.Release(ctx, 1); err != nil {
		t.Fatalf("partial release while the new leader learns: %v", err)
	}
	if h.Copies() != 3 || h.Err() != nil {
		t.Fatalf("after releasing 1 of 4 the hold has %d copies (lost %v); want 3", h.Copies(), (h.Err() != nil))
	}
	poll.Until(t, 2*learningTTL, "the new leader to learn the hold", func() bool { return srv.Stats().Restored == 1 })
	if got := copiesHeld(srv); got != 3 {
		t.Fatalf("the new leader holds %d copies; want the 3 still held", got)
	}
	if err := h.Close(); err != nil || copiesHeld(srv) != 0 {
		t.Fatalf("Close: %v; the new leader holds %d", err, copiesHeld(srv))
	}
}

// TestTransferWhileLearningKeepsTheHold: a transfer of a hold the new
// leader has not heard of yet fails as unavailable (retry), and the hold
// is not lost: once learnt, it transfers.
func TestTransferWhileLearningKeepsTheHold(t *testing.T) {
	t.Parallel()
	h, srv := holdAcrossLeaderChange(t)
	ctx := context.Background()
	if _, err := h.Transfer(ctx, 2, time.Minute); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("transfer of a hold the new leader has not learnt = %v; want an error wrapping ErrUnavailable", err)
	}
	if (h.Err() != nil) || h.Copies() != 4 {
		t.Fatalf("after the refused transfer the hold is lost %v (%v) with %d copies; want 4, not lost", (h.Err() != nil), h.Err(), h.Copies())
	}
	poll.Until(t, 2*learningTTL, "the new leader to learn the hold", func() bool { return srv.Stats().Restored == 1 })
	if _, err := h.Transfer(ctx, 2, time.Minute); err != nil || h.Copies() != 2 || copiesHeld(srv) != 4 {
		t.Fatalf("transfer once learnt: %v; hold %d, server %d", err, h.Copies(), copiesHeld(srv))
	}
}

// TestReleaseAfterUnansweredRelease: a release the service never got is
// applied here and carried by the next refresh; a transfer and a release
// answered before that refresh must not bring its copies back (the
// service, not yet told, answers with more than the hold has here).
func TestReleaseAfterUnansweredRelease(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	srv := startDomainServer(t, s, learningTTL, false)
	a := newClient(t, natstest.Conn(t, s), "a")
	ctx := context.Background()
	h, err := a.Reserve(ctx, "app:sandbox", "acme", 4)
	if err != nil {
		t.Fatal(err)
	}
	// A release of 1 the service never received, as Release applies it
	// when no answer comes.
	h.settle(3)
	if _, err := h.Transfer(ctx, 1, time.Minute); err != nil || h.Copies() != 2 {
		t.Fatalf("transfer of 1 of 3: %v; the hold has %d copies, want 2", err, h.Copies())
	}
	if err := h.Release(ctx, 1); err != nil || h.Copies() != 1 {
		t.Fatalf("release of 1 of 2: %v; the hold has %d copies, want 1", err, h.Copies())
	}
	refreshes := srv.Stats().Refreshes
	poll.Until(t, 2*learningTTL, "a refresh", func() bool { return srv.Stats().Refreshes > refreshes })
	if got := copiesHeld(srv); got != 2 {
		t.Fatalf("after the refresh the service holds %d copies; want 2 (1 held, 1 staged)", got)
	}
}
