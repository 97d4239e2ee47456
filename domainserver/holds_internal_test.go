package domainserver

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
)

// clockServer is a server, not subscribed, on a clock the test moves,
// over copy resource "pool" of namespace "ns" whose domain "g" is in
// group "grp" (limit 1000).
func clockServer(t *testing.T) (*Server, *time.Time) {
	t.Helper()
	nss := map[string]*domainlimit.Namespace{"ns": {Name: "ns", Resources: map[string]domainlimit.Resource{
		"pool": {Name: "pool", Kind: domainlimit.KindCopies, Copies: domainlimit.CopySpec{DomainLimit: domainlimit.Unlimited, GlobalLimit: domainlimit.Unlimited,
			Groups: []domainlimit.Group{{Name: "grp", Limit: 1000, Domains: []string{"g"}}}}},
	}}}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s, err := New(&nats.Conn{}, Options{Config: func() map[string]*domainlimit.Namespace { return nss }, HoldTTL: time.Second,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return s, &now
}

// reserveReply sends a reserve of one copy of domain for client to s and
// returns its reply.
func reserveReply(t *testing.T, s *Server, domain, client string) domainwire.ReserveReply {
	t.Helper()
	r := &fakeRequest{subject: domainwire.Subject("root", domainwire.OpReserve, "ns", "pool"),
		data: []byte(`{"domain":"` + domain + `","client_id":"` + client + `"}`)}
	s.handle(r)
	var out domainwire.ReserveReply
	if err := json.Unmarshal(r.out, &out); err != nil || out.Granted != 1 {
		t.Fatalf("reserve of %s for %s: %s (%v)", domain, client, r.out, err)
	}
	return out
}

// TestRecycledRepliesStartClean: a reply written into a recycled call
// carries nothing of the one before it (groups, shares, hold).
func TestRecycledRepliesStartClean(t *testing.T) {
	s, _ := clockServer(t)
	for range 3 {
		g := reserveReply(t, s, "g", "c1")
		if len(g.Groups) != 1 || len(g.GroupHolds) != 1 || g.Share == nil || len(g.Share.Groups) != 1 {
			t.Fatalf("reserve in a group: %+v", g)
		}
		r := &fakeRequest{subject: domainwire.Subject("root", domainwire.OpReserve, "ns", "pool"), data: []byte(`{"domain":"plain","client_id":"c2"}`)}
		s.handle(r)
		body := string(r.out)
		for _, want := range []string{`"groups":[]`, `"group_holds":[]`, `"share":{"domain":-1,"global":-1}`} {
			if !strings.Contains(body, want) {
				t.Fatalf("reserve outside any group after one in a group: %s lacks %s", body, want)
			}
		}
		if strings.Contains(body, g.HoldID) || strings.Contains(body, g.Seal) {
			t.Fatalf("reply %s repeats the previous hold %s", body, g.HoldID)
		}
	}
}

// TestMemoryFollowsLiveHolds: once the holds are gone, so is the room
// the server grew for them: the holds map is made anew, the kept names
// are dropped, and one sweep expires them all however many there are.
func TestMemoryFollowsLiveHolds(t *testing.T) {
	s, now := clockServer(t)
	const n = 5 * sweepChunk
	ids := map[string]bool{}
	for i := range n {
		ids[reserveReply(t, s, "d"+strconv.Itoa(i%7), "c"+strconv.Itoa(i%5)).HoldID] = true
	}
	if len(ids) != n || len(s.holds) != n || s.byExpiry.n != n || s.holdsPeak != n {
		t.Fatalf("%d holds made: %d distinct ids, %d held, %d in expiry order, peak %d", n, len(ids), len(s.holds), s.byExpiry.n, s.holdsPeak)
	}
	if len(s.kept) != 7+5 {
		t.Fatalf("%d names kept, want the 7 domains and 5 clients", len(s.kept))
	}
	// A release keeps no name of its own: a hold id is one hold's.
	var gone *hold
	for _, h := range s.holds {
		gone = h
		break
	}
	rel := &fakeRequest{subject: domainwire.Subject("root", domainwire.OpRelease, "ns", "pool"),
		data: []byte(`{"client_id":"` + gone.clientID + `","hold_id":"` + gone.id + `"}`)}
	s.handle(rel)
	if string(rel.out) != `{"remaining":0}` || len(s.holds) != n-1 || len(s.kept) != 7+5 {
		t.Fatalf("release of %s: %s; %d holds left, %d names kept", gone.id, rel.out, len(s.holds), len(s.kept))
	}
	delete(ids, gone.id)
	// Holds of one client and domain share their strings.
	var first *hold
	for _, h := range s.holds {
		if first == nil {
			first = h
		}
		if h.clientID == first.clientID && h.domain == first.domain && (!sameString(h.clientID, first.clientID) || !sameString(h.domain, first.domain)) {
			t.Fatalf("holds %s and %s of one client and domain keep copies of their names", h.id, first.id)
		}
	}
	*now = now.Add(time.Second) // not past the expiry yet
	s.Expire()
	if len(s.holds) != n-1 {
		t.Fatalf("%d holds left at their expiry, want %d", len(s.holds), n-1)
	}
	*now = now.Add(time.Nanosecond)
	s.Expire()
	if len(s.holds) != 0 || s.byExpiry.n != 0 || s.byExpiry.front != nil || s.byExpiry.back != nil || s.counts.Expired != n-1 {
		t.Fatalf("after the expiry: %d holds, %d in expiry order, %d expired", len(s.holds), s.byExpiry.n, s.counts.Expired)
	}
	if s.holdsPeak != 0 || s.kept != nil {
		t.Fatalf("after the expiry: the holds map was not made anew (peak %d) or %d names are still kept", s.holdsPeak, len(s.kept))
	}
	reserveReply(t, s, "d0", "c0") // and it serves on
	if len(s.holds) != 1 || s.holdsPeak != 1 {
		t.Fatalf("a reserve after the sweep: %d holds, peak %d", len(s.holds), s.holdsPeak)
	}
}

// sameString reports whether a and b share their bytes.
func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
