package domainserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
)

// reserveSealed reserves copies for domain as client and returns the
// hold as the client lists it in a refresh.
func reserveSealed(t *testing.T, e *env, client, domain string, copies int64) domainwire.Hold {
	t.Helper()
	var r domainwire.ReserveReply
	body := fmt.Sprintf(`{"domain":%q,"copies":%d,"client_id":%q}`, domain, copies, client)
	if code := e.call(t, domainwire.OpReserve, "sandbox", body, &r); code != "" || r.Granted != copies || r.Seal == "" {
		t.Fatalf("reserve %s: %s %+v", body, code, r)
	}
	return domainwire.Hold{HoldID: r.HoldID, Domain: domain, Groups: []string{"free"}, Copies: copies, Seal: r.Seal}
}

// refreshOf lists one hold of client in a refresh and returns the reply.
func refreshOf(t *testing.T, e *env, client string, h domainwire.Hold) domainwire.RefreshReply {
	t.Helper()
	body, err := json.Marshal(domainwire.Refresh{ClientID: client, Holds: []domainwire.Hold{h}})
	if err != nil {
		t.Fatal(err)
	}
	var rep domainwire.RefreshReply
	if code := e.call(t, domainwire.OpRefresh, "sandbox", string(body), &rep); code != "" {
		t.Fatalf("refresh %s: code %s", body, code)
	}
	return rep
}

// TestLearningLeaderAdoptsOnlySealedHolds: a new leader learns the live
// holds from refreshes, and adopts a hold it has not heard of only if the
// seal of a reply of its predecessor vouches for it. Claims of holds
// never granted, of another client's hold, of more copies than granted,
// or under a forged seal are refused (lost) and change nothing; the
// holder's own refresh is adopted, with at most the copies sealed.
func TestLearningLeaderAdoptsOnlySealedHolds(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", nil)
	e := &env{nc: natstest.Conn(t, s)}
	var r domainwire.ReserveReply
	if code := e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"a","copies":2,"client_id":"c1"}`, &r); code != "" || r.Granted != 2 || r.Seal == "" {
		t.Fatalf("reserve: %s %+v", code, r)
	}
	old.Stop()
	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })

	genuine := domainwire.Hold{HoldID: r.HoldID, Domain: "a", Groups: []string{"free"}, Copies: 2, Seal: r.Seal}
	forged := strings.Split(r.Seal, ".")
	forged[0] = "5" // the copies the seal covers
	for _, c := range []struct {
		name   string
		client string
		hold   func(h *domainwire.Hold)
	}{
		{"a hold never granted, without a seal", "thief", func(h *domainwire.Hold) { h.HoldID, h.Seal, h.Copies = "made-up", "", 5 }},
		{"a hold never granted, under another hold's seal", "thief", func(h *domainwire.Hold) { h.HoldID = "made-up" }},
		{"another client's hold with its seal", "thief", func(*domainwire.Hold) {}},
		{"a seal whose copies were raised", "c1", func(h *domainwire.Hold) { h.Copies, h.Seal = 5, strings.Join(forged, ".") }},
		{"another domain", "c1", func(h *domainwire.Hold) { h.Domain = "b" }},
		{"other groups", "c1", func(h *domainwire.Hold) { h.Groups = nil }},
		{"a malformed seal", "c1", func(h *domainwire.Hold) { h.Seal = "2.x.y" }},
	} {
		h := genuine
		h.Groups = slices.Clone(genuine.Groups)
		c.hold(&h)
		rep := refreshOf(t, e, c.client, h)
		if !slices.Equal(rep.Lost, []string{h.HoldID}) || len(rep.Seals) != 0 {
			t.Errorf("%s: reply %+v; want the hold lost and no seal", c.name, rep)
		}
		if st := next.Stats(); st.CopiesHeld != 0 || st.Restored != 0 {
			t.Fatalf("%s: the new leader holds %d copies, restored %d holds; want none", c.name, st.CopiesHeld, st.Restored)
		}
	}
	if st := next.Stats(); st.Unsealed != 7 {
		t.Errorf("unsealed %d holds; want 7", st.Unsealed)
	}
	// Listing more copies than the seal covers (as after a transfer whose
	// reply was lost) gets the seal's.
	more := genuine
	more.Copies = 3
	rep := refreshOf(t, e, "c1", more)
	if len(rep.Lost) != 0 || rep.Seals[r.HoldID] == "" {
		t.Fatalf("the holder's refresh listing 3 copies: %+v; want the hold kept with a new seal", rep)
	}
	if st := next.Stats(); st.CopiesHeld != 2 || st.Restored != 1 {
		t.Fatalf("after the holder's refresh the new leader holds %d copies, restored %d; want 2 and 1", st.CopiesHeld, st.Restored)
	}
	// A release (whose reply was lost) leaves fewer copies than sealed:
	// the next leader adopts what the holder lists.
	genuine.Copies, genuine.Seal = 1, rep.Seals[r.HoldID]
	next.Stop()
	third := startStateful(t, s, "third", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
	if rep := refreshOf(t, e, "c1", genuine); len(rep.Lost) != 0 {
		t.Fatalf("listing fewer copies than sealed: %+v", rep)
	}
	if st := third.Stats(); st.CopiesHeld != 1 {
		t.Fatalf("the third leader holds %d copies; want 1", st.CopiesHeld)
	}
}

// TestSealExpires: a seal vouches for its hold for the seal TTL only.
func TestSealExpires(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", func(o *domainserver.Options) { o.SealTTL = time.Hour })
	e := &env{nc: natstest.Conn(t, s)}
	var r domainwire.ReserveReply
	if code := e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"a","copies":2,"client_id":"c1"}`, &r); code != "" || r.Granted != 2 {
		t.Fatalf("reserve: %s %+v", code, r)
	}
	old.Stop()
	later := time.Now().Add(2 * time.Hour)
	next := startStateful(t, s, "next", func(o *domainserver.Options) {
		o.Now = func() time.Time { return later }
		o.LearnUntil = later.Add(time.Hour)
	})
	rep := refreshOf(t, e, "c1", domainwire.Hold{HoldID: r.HoldID, Domain: "a", Groups: []string{"free"}, Copies: 2, Seal: r.Seal})
	if len(rep.Lost) != 1 || next.Stats().Unsealed != 1 || next.Stats().CopiesHeld != 0 {
		t.Fatalf("a seal two hours old with a one hour TTL: %+v, %+v", rep, next.Stats())
	}
}

// TestSealKeyInTheStateBucket: replicas share the key through the state
// bucket; a value there that allot did not write is replaced, not used.
func TestSealKeyInTheStateBucket(t *testing.T) {
	s := natstest.Server(t)
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: domainserver.DefaultStateBucket})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "root.domain.seal", []byte("short")); err != nil {
		t.Fatal(err)
	}
	startStateful(t, s, "first", nil)
	e, err := kv.Get(ctx, "root.domain.seal")
	if err != nil || len(e.Value()) != domainserver.SealKeyLen {
		t.Fatalf("seal key after the first replica started: %v, %d bytes", err, len(e.Value()))
	}
	startStateful(t, s, "second", nil)
	if again, err := kv.Get(ctx, "root.domain.seal"); err != nil || again.Revision() != e.Revision() {
		t.Fatalf("the second replica changed the seal key: %v", err)
	}
	if _, err := domainserver.New(natstest.Conn(t, s), domainserver.Options{Config: sources.DomainsFunc((&config{}).get), SealKey: []byte("short")}); err == nil {
		t.Fatal("a seal key of 5 bytes was accepted")
	}
}

// TestLearningLeaderAdoptsAHoldOnce: a hold that ended at a learning
// leader (transferred away, released) is not adopted again from a refresh
// listing it with its seal: else a client granted 5 copies once could
// list, transfer and seize them over and over.
func TestLearningLeaderAdoptsAHoldOnce(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", nil)
	e := &env{nc: natstest.Conn(t, s)}
	x, y := reserveSealed(t, e, "c1", "a", 2), reserveSealed(t, e, "c1", "b", 2)
	old.Stop()
	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
	// x is adopted, then transferred away and seized by its own client.
	refreshOf(t, e, "c1", x)
	seized(t, e, "c1", transferred(t, e, "c1", x.HoldID))
	// y is released before this leader heard of it.
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"c1","hold_id":"`+y.HoldID+`"}`, nil); code != "" {
		t.Fatalf("release: %s", code)
	}
	for _, h := range []domainwire.Hold{x, y} {
		if rep := refreshOf(t, e, "c1", h); len(rep.Lost) != 1 {
			t.Errorf("listing hold %s again after it ended: %+v; want it lost", h.Domain, rep)
		}
	}
	if st := next.Stats(); st.CopiesHeld != 2 {
		t.Fatalf("the learning leader holds %d copies; want 2 (the seized ones)", st.CopiesHeld)
	}
}

// TestLearningLeaderKeepsTheLimits: seals vouch that holds were granted,
// not that they are still held. A client that moved its copies along a
// chain of its own transfers and seizes before a failover has a valid
// seal for every hold of the chain; listing them all to the new leader
// gets it no more than the limits allow (domain limit 5 here).
func TestLearningLeaderKeepsTheLimits(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", nil)
	e := &env{nc: natstest.Conn(t, s)}
	holds := []domainwire.Hold{reserveSealed(t, e, "c1", "a", 5)}
	for range 4 {
		sz := seized(t, e, "c1", transferred(t, e, "c1", holds[len(holds)-1].HoldID))
		holds = append(holds, domainwire.Hold{HoldID: sz.HoldID, Domain: "a", Groups: []string{"free"}, Copies: 5, Seal: sz.Seal})
	}
	old.Stop()
	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
	body, err := json.Marshal(domainwire.Refresh{ClientID: "c1", Holds: holds})
	if err != nil {
		t.Fatal(err)
	}
	var rep domainwire.RefreshReply
	if code := e.call(t, domainwire.OpRefresh, "sandbox", string(body), &rep); code != "" {
		t.Fatalf("refresh: %s", code)
	}
	if st := next.Stats(); st.CopiesHeld != 5 || len(rep.Lost) != 4 {
		t.Fatalf("the chain of 5 holds of 5 copies listed at once: %d copies held, %d holds lost; want 5 and 4", st.CopiesHeld, len(rep.Lost))
	}
}

// TestReleaseOfAnotherClientsHold: at a learning leader, a release naming
// a hold id the leader has not heard of, sent by another client, does not
// keep the hold's owner from having it adopted.
func TestReleaseOfAnotherClientsHold(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", nil)
	e := &env{nc: natstest.Conn(t, s)}
	h := reserveSealed(t, e, "victim", "a", 2)
	old.Stop()
	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"thief","hold_id":"`+h.HoldID+`"}`, nil); code != "" {
		t.Fatalf("the thief's release: %s", code)
	}
	rep := refreshOf(t, e, "victim", h)
	if len(rep.Lost) != 0 || next.Stats().CopiesHeld != 2 {
		t.Fatalf("the victim's refresh after the thief's release: %+v, %d copies held", rep, next.Stats().CopiesHeld)
	}
}

// TestReseizeKeepsTheLimits: a seize retried at a learning leader makes
// the hold again from its record only if it fits in the limits: a client
// that first had an older hold of the same copies adopted (its seal is
// still valid) does not get them twice.
func TestReseizeKeepsTheLimits(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", nil)
	e := &env{nc: natstest.Conn(t, s)}
	h1 := reserveSealed(t, e, "c1", "a", 5) // domain limit 5
	tid := transferred(t, e, "c1", h1.HoldID)
	seized(t, e, "c1", tid)
	old.Stop()
	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
	refreshOf(t, e, "c1", h1)
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c1","transfer_id":"`+tid+`"}`, nil); code != "409" {
		t.Errorf("seize retried after the older hold was adopted: code %q, want 409", code)
	}
	if st := next.Stats(); st.CopiesHeld > 5 {
		t.Fatalf("the learning leader counts %d copies; the domain limit is 5", st.CopiesHeld)
	}
}

// TestLostTransferReplyAcrossFailover: an agent whose transfer reply was
// lost lists its hold with the count before the transfer; a new leader
// that restored the staged transfer adopts what is left.
func TestLostTransferReplyAcrossFailover(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", nil)
	e := &env{nc: natstest.Conn(t, s)}
	h1 := reserveSealed(t, e, "c1", "a", 5)
	if code := e.call(t, domainwire.OpTransfer, "sandbox", `{"client_id":"c1","hold_id":"`+h1.HoldID+`","copies":2,"ttl":"1h"}`, nil); code != "" {
		t.Fatalf("transfer: %s", code)
	}
	old.Stop()
	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
	if rep := refreshOf(t, e, "c1", h1); len(rep.Lost) != 0 || next.Stats().CopiesHeld != 5 {
		t.Fatalf("the hold listed with 5 after a transfer of 2: %+v, %d copies counted; want it kept, 5 counted", rep, next.Stats().CopiesHeld)
	}
}
