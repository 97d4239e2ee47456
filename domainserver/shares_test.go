package domainserver_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
)

// TestRepliesTellShares: every reply about a copy-limited resource
// (reserve, refresh, seize) tells the client the namespace's fail mode
// and its share of the domain's limits, its own copies and an even part
// of the room left among the clients seen; a rate reply tells the fail
// mode. Namespace "app": sandbox has domain limit 5, global 8, group
// free (a, b) 6.
func TestRepliesTellShares(t *testing.T) {
	e := start(t, nil)
	free := func(n int64) []domainwire.GroupShare { return []domainwire.GroupShare{{Name: "free", Share: n}} }
	var r domainwire.ReserveReply
	e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"a","copies":2,"client_id":"c1"}`, &r)
	if want := (&domainwire.Share{Global: 2 + 6, Domain: 2 + 3, Groups: free(2 + 4)}); r.Fail != "share" || !reflect.DeepEqual(r.Share, want) {
		t.Fatalf("c1 alone: fail %q, share %+v, want %+v", r.Fail, r.Share, want)
	}
	holdA := domainwire.Hold{HoldID: r.HoldID, Domain: "a", Groups: r.Groups, Copies: 2, Seal: r.Seal}
	// c2 counts itself: half the room left under the global limit and
	// the group's, all of b's.
	e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"b","copies":1,"client_id":"c2"}`, &r)
	if want := (&domainwire.Share{Global: 1 + 5/2, Domain: 1 + 4, Groups: free(1 + 3/2)}); !reflect.DeepEqual(r.Share, want) {
		t.Fatalf("c2: share %+v, want %+v", r.Share, want)
	}
	// A refused reserve tells a share too: what the client holds, and
	// its part of the room.
	e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"b","copies":9,"client_id":"c2"}`, &r)
	if want := (&domainwire.Share{Global: 1 + 5/2, Domain: 1 + 4, Groups: free(1 + 3/2)}); r.Granted != 0 || !reflect.DeepEqual(r.Share, want) {
		t.Fatalf("c2 refused: %+v, share %+v, want %+v", r, r.Share, want)
	}
	// c1 learns with its refresh that c2 is there.
	rep := refreshOf(t, e, "c1", holdA)
	if want := map[string]domainwire.Share{"a": {Global: 2 + 5/2, Domain: 2 + 3, Groups: free(2 + 3/2)}}; rep.Fail != "share" || !reflect.DeepEqual(rep.Shares, want) {
		t.Fatalf("c1's refresh: fail %q, shares %+v, want %+v", rep.Fail, rep.Shares, want)
	}
	// A seize tells the seizer its share: c1 staged 1 copy, c3 took it.
	var tr domainwire.TransferReply
	if code := e.call(t, domainwire.OpTransfer, "sandbox", `{"client_id":"c1","hold_id":"`+holdA.HoldID+`","copies":1}`, &tr); code != "" {
		t.Fatalf("transfer: %s", code)
	}
	sz := seized(t, e, "c3", tr.TransferID)
	// c3: its copy, a third of the 5 left globally, half of a's 3, a
	// third of free's 3.
	if want := (&domainwire.Share{Global: 1 + 5/3, Domain: 1 + 3/2, Groups: free(1 + 1)}); sz.Fail != "share" || !reflect.DeepEqual(sz.Share, want) {
		t.Fatalf("c3's seize: fail %q, share %+v, want %+v", sz.Fail, sz.Share, want)
	}
	var rr domainwire.RateReply
	if e.call(t, domainwire.OpRequest, "api", `{"domain":"a"}`, &rr); rr.Fail != "share" {
		t.Fatalf("rate reply: fail %q", rr.Fail)
	}
	// A reload to fail: closed is told at once.
	ns := testNamespace()
	ns.Fail = domainlimit.FailClosed
	e.cfg.set(ns)
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"c","copies":1,"client_id":"c4"}`, &r); r.Fail != "closed" {
		t.Fatalf("after the reload: fail %q", r.Fail)
	}
	if e.call(t, domainwire.OpRequest, "api", `{"domain":"a"}`, &rr); rr.Fail != "closed" {
		t.Fatalf("rate reply after the reload: fail %q", rr.Fail)
	}
}

// TestSharesForgetClientsAfterTheTTL: a client that stopped holding
// copies still counts in the others' shares for one hold TTL after it was
// last seen (its own share may still be in use), then no longer.
func TestSharesForgetClientsAfterTheTTL(t *testing.T) {
	e := start(t, func(o *domainserver.Options) { o.HoldTTL = time.Minute })
	var r domainwire.ReserveReply
	e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"c","copies":2,"client_id":"gone"}`, &r)
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"gone","hold_id":"`+r.HoldID+`"}`, nil); code != "" {
		t.Fatalf("release: %s", code)
	}
	e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"d","copies":1,"client_id":"stays"}`, &r)
	if r.Share.Global != 1+7/2 {
		t.Fatalf("share with the other client seen: %+v", r.Share)
	}
	held := domainwire.Hold{HoldID: r.HoldID, Domain: "d", Groups: r.Groups, Copies: 1, Seal: r.Seal}
	e.clk.add(40 * time.Second)
	e.srv.Expire()
	if rep := refreshOf(t, e, "stays", held); rep.Shares["d"].Global != 1+7/2 {
		t.Fatalf("share within the TTL: %+v", rep.Shares)
	}
	e.clk.add(21 * time.Second)
	e.srv.Expire()
	if rep := refreshOf(t, e, "stays", held); rep.Shares["d"].Global != 8 {
		t.Fatalf("share once the other client is forgotten: %+v", rep.Shares)
	}
}

// TestLearningLeaderTellsNoShare: a leader still learning the holds tells
// the fail mode but no share, as its counts are not complete yet.
func TestLearningLeaderTellsNoShare(t *testing.T) {
	e := start(t, func(o *domainserver.Options) { o.LearnUntil = time.Unix(1_800_000_000, 0).Add(time.Minute) })
	var r domainwire.ReserveReply
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"a","copies":1,"client_id":"c1"}`, &r); !r.Learning || r.Fail != "share" || r.Share != nil {
		t.Fatalf("reserve while learning: %+v", r)
	}
	body, err := json.Marshal(domainwire.Refresh{ClientID: "c1", Holds: []domainwire.Hold{{HoldID: "x", Domain: "a", Copies: 1, Seal: "forged"}}})
	if err != nil {
		t.Fatal(err)
	}
	var rep domainwire.RefreshReply
	if code := e.call(t, domainwire.OpRefresh, "sandbox", string(body), &rep); code != "" || rep.Shares != nil {
		t.Fatalf("refresh while learning: %s %+v", code, rep)
	}
}

// TestRefreshTooLargeForShares: a refresh reply that would not fit in a
// NATS message with its shares (many long domain names) goes without
// them, and still keeps the holds alive.
func TestRefreshTooLargeForShares(t *testing.T) {
	s := natstest.MaxPayloadServer(t, 32<<10)
	cfg := &config{}
	ns := testNamespace()
	ns.AllowUnconfigured = true
	cfg.set(ns)
	e := &env{nc: natstest.Conn(t, s), cfg: cfg}
	e.srv = run(t, natstest.Conn(t, s), domainserver.Options{Config: sources.DomainsFunc(cfg.get), HoldTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}, nil)
	var holds []domainwire.Hold
	for i := range 100 {
		var r domainwire.ReserveReply
		d := fmt.Sprintf("%0250d", i)
		if code := e.call(t, domainwire.OpReserve, "pool", `{"domain":"`+d+`","client_id":"c"}`, &r); code != "" || r.Granted != 1 {
			t.Fatalf("reserve: %s %+v", code, r)
		}
		holds = append(holds, domainwire.Hold{HoldID: r.HoldID, Domain: d, Groups: []string{}, Copies: 1})
	}
	body, err := json.Marshal(domainwire.Refresh{ClientID: "c", Holds: holds})
	if err != nil {
		t.Fatal(err)
	}
	var rep domainwire.RefreshReply
	if code := e.call(t, domainwire.OpRefresh, "pool", string(body), &rep); code != "" || len(rep.Lost) != 0 || len(rep.Seals) != 100 || rep.Shares != nil || rep.Fail != "share" {
		t.Fatalf("refresh of %d bytes: %s, %d lost, %d seals, %d shares, fail %q", len(body), code, len(rep.Lost), len(rep.Seals), len(rep.Shares), rep.Fail)
	}
}
