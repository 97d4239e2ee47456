package domainserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
)

// startStateful starts a server of namespace "app" that keeps its staged
// transfers in the state bucket of s.
func startStateful(t *testing.T, s *server.Server, id string, mod func(*domainserver.Options)) *domainserver.Server {
	t.Helper()
	cfg := &config{}
	cfg.set(testNamespace())
	nc := natstest.Conn(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	opts := domainserver.Options{ServerID: id, Config: sources.DomainsFunc(cfg.get), HoldTTL: time.Hour, JetStream: js, Logger: slog.New(slog.DiscardHandler)}
	return run(t, nc, opts, mod)
}

// stage reserves 2 copies for domain and stages 1 of them; it returns
// the transfer id.
func stage(t *testing.T, e *env, domain string) string {
	t.Helper()
	var r domainwire.ReserveReply
	if code := e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"`+domain+`","copies":2,"client_id":"c-`+domain+`"}`, &r); code != "" || r.Granted != 2 {
		t.Fatalf("reserve for %s: %s %+v", domain, code, r)
	}
	var tr domainwire.TransferReply
	if code := e.call(t, domainwire.OpTransfer, "sandbox", `{"client_id":"c-`+domain+`","hold_id":"`+r.HoldID+`","copies":1,"ttl":"1h"}`, &tr); code != "" {
		t.Fatalf("transfer for %s: %s", domain, code)
	}
	return tr.TransferID
}

// seized seizes transferID as client and returns the reply.
func seized(t *testing.T, e *env, client, transferID string) domainwire.SeizeReply {
	t.Helper()
	var sz domainwire.SeizeReply
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"`+client+`","transfer_id":"`+transferID+`"}`, &sz); code != "" {
		t.Fatalf("seize of %s by %s: %s", transferID, client, code)
	}
	return sz
}

// transferred transfers all of holdID (client's) for an hour and returns
// the transfer id.
func transferred(t *testing.T, e *env, client, holdID string) string {
	t.Helper()
	var tr domainwire.TransferReply
	if code := e.call(t, domainwire.OpTransfer, "sandbox", `{"client_id":"`+client+`","hold_id":"`+holdID+`","ttl":"1h"}`, &tr); code != "" {
		t.Fatalf("transfer of %s: %s", holdID, code)
	}
	return tr.TransferID
}

// TestDeposedLeaderKeepsOffTheTransfers: a leader whose term has lapsed
// but which has not been stopped yet (frozen, or its owner slow to
// notice) still sweeps. Its view of the staged transfers is stale, and
// writing it would drop those its successor staged since (and bring back
// ones seized since); the successor's transfers must survive it, and
// reach the leader after.
func TestDeposedLeaderKeepsOffTheTransfers(t *testing.T) {
	s := natstest.Server(t)
	clk := &clock{t: time.Now()}
	var valid atomic.Bool
	valid.Store(true)
	old := startStateful(t, s, "old", func(o *domainserver.Options) { o.Now, o.Valid, o.HoldTTL = clk.now, valid.Load, 200*time.Millisecond })
	e := &env{nc: natstest.Conn(t, s)}
	first := stage(t, e, "a")

	valid.Store(false) // the old leader's term lapses
	next := startStateful(t, s, "next", nil)
	if st := next.Stats(); st.Transfers != 1 {
		t.Fatalf("the successor found %d staged transfers; want 1", st.Transfers)
	}
	second := stage(t, e, "b")

	// The deposed leader's sweeper finds the first transfer expired by
	// its clock and writes what it has left.
	clk.add(2 * time.Hour)
	poll.Until(t, 30*time.Second, "the deposed leader's sweep", func() bool { return old.Stats().TransfersExpired == 1 })
	old.Stop()

	next.Stop()
	last := startStateful(t, s, "last", nil)
	if st := last.Stats(); st.Transfers != 2 || st.CopiesHeld != 2 {
		t.Fatalf("after the deposed leader's sweep the next leader finds %d transfers (%d copies); want both staged ones: %s, %s",
			st.Transfers, st.CopiesHeld, first, second)
	}
	var sz domainwire.SeizeReply
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+second+`"}`, &sz); code != "" || sz.Copies != 1 {
		t.Fatalf("seize of the successor's transfer: %s %+v", code, sz)
	}
}

// TestTransfersWriteWhoseAnswerWasLost: the key holding exactly what the
// leader last wrote, at a revision it did not see (its write landed but
// the answer was lost), is the leader's own: it keeps serving and
// writing, rather than taking itself for deposed.
func TestTransfersWriteWhoseAnswerWasLost(t *testing.T) {
	s := natstest.Server(t)
	srv := startStateful(t, s, "leader", nil)
	e := &env{nc: natstest.Conn(t, s)}
	stage(t, e, "a")
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), domainserver.DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := "root.domain.0.transfers"
	cur, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, cur.Value()); err != nil {
		t.Fatal(err)
	}
	stage(t, e, "b")
	if st := srv.Stats(); st.Transfers != 2 || !st.Serving {
		t.Fatalf("after its own write landed unseen: %+v", st)
	}
	if got, err := kv.Get(context.Background(), key); err != nil || got.Revision() != cur.Revision()+2 {
		t.Fatalf("the second transfer was not written after the unseen one: %v", err)
	}
}

// TestSeizeRetryAcrossFailover: a seizer whose reply was lost asks again
// after a failover. The new leader, still learning, has not heard of the
// seized hold (its holder does not know it, so nothing refreshes it) and
// makes it again from the record in the state bucket; anyone else is
// refused, and a leader that is no longer learning answers 404 (the hold
// has expired with its predecessor by then).
func TestSeizeRetryAcrossFailover(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", nil)
	e := &env{nc: natstest.Conn(t, s)}
	id := stage(t, e, "a")
	var first domainwire.SeizeReply
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+id+`"}`, &first); code != "" || first.Copies != 1 {
		t.Fatalf("seize: %s %+v", code, first)
	}
	old.Stop() // and the reply is taken as lost

	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
	if st := next.Stats(); st.Transfers != 0 || st.CopiesHeld != 0 {
		t.Fatalf("the seized transfer counts as staged at the successor: %+v", st)
	}
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c4","transfer_id":"`+id+`"}`, nil); code != "409" {
		t.Errorf("another client's seize: %q, want 409", code)
	}
	var again domainwire.SeizeReply
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+id+`"}`, &again); code != "" ||
		again.HoldID != first.HoldID || again.Copies != 1 || again.Domain != "a" {
		t.Fatalf("the seizer's retry at the new leader: %s %+v, want %+v", code, again, first)
	}
	if st := next.Stats(); st.Holds != 1 || st.CopiesHeld != 1 {
		t.Errorf("the seized hold is not counted at the new leader: %+v", st)
	}
	var rel domainwire.ReleaseReply
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"c3","hold_id":"`+first.HoldID+`"}`, &rel); code != "" {
		t.Fatalf("release of the seized hold: %s", code)
	}
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+id+`"}`, nil); code != "404" {
		t.Errorf("seize after releasing its hold: %q, want 404", code)
	}
	next.Stop()

	last := startStateful(t, s, "last", nil)
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+id+`"}`, nil); code != "404" {
		t.Errorf("retry at a leader that is not learning: %q, want 404", code)
	}
	if st := last.Stats(); st.CopiesHeld != 0 {
		t.Errorf("copies counted at the last leader: %+v", st)
	}
}

// TestReseizeAfterTransferAway: a seized hold transferred on loses its
// seize record, so a new leader still learning cannot make the hold
// again from the record beside the copies that moved on (counting them
// twice).
func TestReseizeAfterTransferAway(t *testing.T) {
	s := natstest.Server(t)
	old := startStateful(t, s, "old", nil)
	e := &env{nc: natstest.Conn(t, s)}
	t1 := stage(t, e, "a")
	h1 := seized(t, e, "S", t1)
	h2 := seized(t, e, "X", transferred(t, e, "S", h1.HoldID))
	old.Stop()
	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
	e.call(t, domainwire.OpRefresh, "sandbox", `{"client_id":"X","holds":[{"hold_id":"`+h2.HoldID+`","domain":"a","groups":["free"],"copies":1,"seal":"`+h2.Seal+`"}]}`, nil)
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"S","transfer_id":"`+t1+`"}`, nil); code != "404" {
		t.Errorf("S seizing its first transfer again: code %q, want 404", code)
	}
	if st := next.Stats(); st.CopiesHeld != 1 {
		t.Fatalf("the new leader holds %d copies; want 1 (X's)", st.CopiesHeld)
	}
}

// TestReseizeAfterRelease: a seizer that released its seized hold cannot
// seize the same transfer again, from this leader or from a new one still
// learning (which would otherwise make the hold again from the seize
// record, without a limit check). The release drops the record from the
// state bucket.
func TestReseizeAfterRelease(t *testing.T) {
	for _, viaLearning := range []bool{false, true} {
		s := natstest.Server(t)
		old := startStateful(t, s, "old", nil)
		e := &env{nc: natstest.Conn(t, s)}
		t1 := stage(t, e, "a")
		h := seized(t, e, "S", t1)
		if viaLearning {
			// The release reaches a new leader that has not heard of the
			// hold yet.
			old.Stop()
			old = startStateful(t, s, "next", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
		}
		if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"S","hold_id":"`+h.HoldID+`"}`, nil); code != "" {
			t.Fatalf("release: %s", code)
		}
		old.Stop()
		next := startStateful(t, s, "third", func(o *domainserver.Options) { o.LearnUntil = time.Now().Add(time.Hour) })
		if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"S","transfer_id":"`+t1+`"}`, nil); code != "404" {
			t.Errorf("released first at a learning leader %v: seizing the transfer again at a learning leader: code %q, want 404", viaLearning, code)
		}
		// c-a's reserve of 2 staged 1; its other copy is a hold that
		// nobody refreshes here.
		if st := next.Stats(); st.CopiesHeld != 0 {
			t.Errorf("released first at a learning leader %v: the new leader holds %d copies; want 0", viaLearning, st.CopiesHeld)
		}
	}
}

// TestTransfersKeyFull: the staged transfers live in one KV value, which
// must fit in one NATS message. A transfer that would not fit is refused
// with 429 and changes nothing; seizes always succeed (a seize that
// cannot keep its record forgets the transfer instead).
func TestTransfersKeyFull(t *testing.T) {
	s := natstest.MaxPayloadServer(t, 32<<10)
	srv := startStateful(t, s, "leader", func(o *domainserver.Options) {
		cfg := &config{}
		ns := testNamespace()
		ns.AllowUnconfigured = true
		cfg.set(ns)
		o.Config = sources.DomainsFunc(cfg.get)
	})
	e := &env{nc: natstest.Conn(t, s)}
	owner := strings.Repeat("o", 200)
	var ids []string
	full := false
	for i := 0; i < 400 && !full; i++ {
		var r domainwire.ReserveReply
		if code := e.call(t, domainwire.OpReserve, "free", fmt.Sprintf(`{"domain":"d%d","copies":1,"client_id":%q}`, i, owner), &r); code != "" {
			t.Fatalf("reserve %d: %s", i, code)
		}
		var tr domainwire.TransferReply
		switch code := e.call(t, domainwire.OpTransfer, "free", `{"client_id":"`+owner+`","hold_id":"`+r.HoldID+`","ttl":"1h"}`, &tr); code {
		case "":
			ids = append(ids, tr.TransferID)
		case "429":
			full = true
			if st := srv.Stats(); st.Holds != 1 || st.Transfers != len(ids) || !st.Serving {
				t.Fatalf("a refused transfer changed the state: %+v", st)
			}
		default:
			t.Fatalf("transfer %d: code %s", i, code)
		}
	}
	if !full {
		t.Fatal("400 transfers of about 300 bytes each fit in 32 KiB")
	}
	seizer := strings.Repeat("w", 200)
	for i, id := range ids {
		if code := e.call(t, domainwire.OpSeize, "free", `{"client_id":"`+seizer+`","transfer_id":"`+id+`"}`, nil); code != "" {
			t.Fatalf("seize %d of %d: code %s", i, len(ids), code)
		}
	}
	if st := srv.Stats(); st.Transfers != 0 || st.Holds != len(ids)+1 || !st.Serving {
		t.Fatalf("after the seizes: %+v", st)
	}
}

// TestUnseizedTransferEndsWithItsTTL: staged copies nobody seizes are
// released when the transfer's ttl ends (paper 3.1, transfer), whatever
// the hold TTL that paces the sweeper: the copies come back at the very
// moment a seize is answered 404, for a reserve as for the STATS.
func TestUnseizedTransferEndsWithItsTTL(t *testing.T) {
	e := start(t, nil) // hold TTL 1h: the sweeper does not run during the test
	var r domainwire.ReserveReply
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"c","copies":5,"client_id":"c1"}`, &r); r.Granted != 5 {
		t.Fatalf("reserve 5: %+v", r)
	}
	var tr domainwire.TransferReply
	if code := e.call(t, domainwire.OpTransfer, "sandbox", `{"client_id":"c1","hold_id":"`+r.HoldID+`","copies":3,"ttl":"1s"}`, &tr); code != "" || tr.Remaining != 2 {
		t.Fatalf("transfer 3 for 1s: %s %+v", code, tr)
	}
	// At the end of the ttl the copies are still staged (a seize then
	// would succeed): 3 of the global 8 are free.
	e.clk.add(time.Second)
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"d","copies":5,"client_id":"c2"}`, &r); r.Granted != 0 || r.GlobalHolds != 5 {
		t.Fatalf("reserve 5 at the end of the ttl: %+v; want refused, 5 held", r)
	}
	if st := e.srv.Stats(); st.Transfers != 1 || st.CopiesHeld != 5 {
		t.Fatalf("stats at the end of the ttl: %+v", st)
	}
	// Just after it, the transfer is gone and so are its copies.
	e.clk.add(time.Nanosecond)
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+tr.TransferID+`"}`, nil); code != "404" {
		t.Fatalf("seize after the ttl: %q, want 404", code)
	}
	if st := e.srv.Stats(); st.Transfers != 0 || st.CopiesHeld != 2 || st.TransfersExpired != 1 {
		t.Fatalf("stats after the ttl: %+v; want no transfer, 2 copies held", st)
	}
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"d","copies":5,"client_id":"c2"}`, &r); r.Granted != 5 || r.GlobalHolds != 7 {
		t.Fatalf("reserve 5 after the ttl: %+v; want the staged copies back", r)
	}
}

// TestExpiredTransferReachesTheStateBucket: a transfer released at
// decision time is dropped from the state bucket too, so a successor
// (whatever its clock) does not count it.
func TestExpiredTransferReachesTheStateBucket(t *testing.T) {
	s := natstest.Server(t)
	clk := &clock{t: time.Now()}
	old := startStateful(t, s, "old", func(o *domainserver.Options) { o.Now = clk.now })
	e := &env{nc: natstest.Conn(t, s)}
	var r domainwire.ReserveReply
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"c","copies":2,"client_id":"c1"}`, &r); r.Granted != 2 {
		t.Fatalf("reserve: %+v", r)
	}
	if code := e.call(t, domainwire.OpTransfer, "sandbox", `{"client_id":"c1","hold_id":"`+r.HoldID+`","copies":1,"ttl":"1s"}`, nil); code != "" {
		t.Fatalf("transfer: %s", code)
	}
	clk.add(2 * time.Second)
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"d","copies":1,"client_id":"c2"}`, &r); r.GlobalHolds != 2 {
		t.Fatalf("reserve after the ttl: %+v; want 1 + 1 held", r)
	}
	old.Stop()
	// The successor's clock is behind: by it the transfer would still run.
	next := startStateful(t, s, "next", func(o *domainserver.Options) { o.Now = func() time.Time { return clk.now().Add(-time.Hour) } })
	if st := next.Stats(); st.Transfers != 0 {
		t.Fatalf("the successor restored an expired transfer: %+v", st)
	}
}
