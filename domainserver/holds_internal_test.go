package domainserver

import (
	"encoding/binary"
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
	"github.com/allot/allot/internal/sources"
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
	s, err := New(&nats.Conn{}, Options{Config: sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return nss }), HoldTTL: time.Second,
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

// TestMemoryFollowsLiveHolds: a released hold's slot goes to the next
// hold; once the holds are gone, so is the room the server grew for
// them (the index's slots and the kept names), and one sweep expires
// them all however many there are.
func TestMemoryFollowsLiveHolds(t *testing.T) {
	s, now := clockServer(t)
	const n = 5 * sweepChunk
	ids := map[string]bool{}
	for i := range n {
		ids[reserveReply(t, s, "d"+strconv.Itoa(i%7), "c"+strconv.Itoa(i%5)).HoldID] = true
	}
	if len(ids) != n || s.holds.len() != n || s.byExpiry.n != n || len(s.holds.slots) != n || len(s.holds.others) != 0 {
		t.Fatalf("%d holds made: %d distinct ids, %d held, %d in expiry order, %d slots, %d others", n, len(ids), s.holds.len(), s.byExpiry.n,
			len(s.holds.slots), len(s.holds.others))
	}
	if len(s.kept) != 7+5 {
		t.Fatalf("%d names kept, want the 7 domains and 5 clients", len(s.kept))
	}
	// A release keeps no name of its own: a hold id is one hold's.
	gone := s.holds.slots[n/2]
	rel := &fakeRequest{subject: domainwire.Subject("root", domainwire.OpRelease, "ns", "pool"),
		data: []byte(`{"client_id":"` + gone.clientID + `","hold_id":"` + gone.id + `"}`)}
	s.handle(rel)
	if string(rel.out) != `{"remaining":0}` || s.holds.len() != n-1 || len(s.kept) != 7+5 || s.holds.get(gone.id) != nil {
		t.Fatalf("release of %s: %s; %d holds left, %d names kept", gone.id, rel.out, s.holds.len(), len(s.kept))
	}
	// Its slot goes to the next hold, under another id.
	next := reserveReply(t, s, "d0", "c0").HoldID
	if s.holds.slots[n/2] == nil || s.holds.slots[n/2].id != next || next == gone.id || len(s.holds.slots) != n {
		t.Fatalf("a reserve after a release: hold %s, %d slots", next, len(s.holds.slots))
	}
	ids[next] = true
	delete(ids, gone.id)
	// Holds of one client and domain share their strings.
	var first *hold
	s.holds.all(func(h *hold) {
		if first == nil {
			first = h
		}
		if h.clientID == first.clientID && h.domain == first.domain && (!sameString(h.clientID, first.clientID) || !sameString(h.domain, first.domain)) {
			t.Fatalf("holds %s and %s of one client and domain keep copies of their names", h.id, first.id)
		}
		if s.holds.get(h.id) != h {
			t.Fatalf("hold %s is not found by its id", h.id)
		}
	})
	*now = now.Add(time.Second) // not past the expiry yet
	s.Expire()
	if s.holds.len() != n {
		t.Fatalf("%d holds left at their expiry, want %d", s.holds.len(), n)
	}
	*now = now.Add(time.Nanosecond)
	s.Expire()
	if s.holds.len() != 0 || s.byExpiry.n != 0 || s.byExpiry.front != nil || s.byExpiry.back != nil || s.counts.Expired != n {
		t.Fatalf("after the expiry: %d holds, %d in expiry order, %d expired", s.holds.len(), s.byExpiry.n, s.counts.Expired)
	}
	if s.holds.slots != nil || s.holds.free != nil || s.kept != nil {
		t.Fatalf("after the expiry: %d slots, %d free ones and %d names are still kept", len(s.holds.slots), len(s.holds.free), len(s.kept))
	}
	reserveReply(t, s, "d0", "c0") // and it serves on
	if s.holds.len() != 1 || len(s.holds.slots) != 1 {
		t.Fatalf("a reserve after the sweep: %d holds, %d slots", s.holds.len(), len(s.holds.slots))
	}
}

// sameString reports whether a and b share their bytes.
func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestHoldIndexForeignIDs: holds whose id this server did not make (a
// predecessor's, adopted from a refresh; a seize's) are found by their
// whole id, even one that names a slot another hold has.
func TestHoldIndexForeignIDs(t *testing.T) {
	var x holdIndex
	mine := &hold{}
	x.reserve(mine)
	slot, ok := slotOf(mine.id)
	if !ok || slot != 0 {
		t.Fatalf("first id %q names slot %d (%v), want 0", mine.id, slot, ok)
	}
	// Slot 0 too, with other random bytes: a predecessor's id.
	var b [12]byte
	b[11] = 1
	var enc [20]byte
	idEncoding.Encode(enc[:], b[:])
	same := &hold{id: string(enc[:])}
	plain := &hold{id: "not-one-of-ours"}
	if same.id == mine.id {
		t.Fatal("the test's ids are equal")
	}
	x.put(same)
	x.put(plain)
	for _, h := range []*hold{mine, same, plain} {
		if x.get(h.id) != h {
			t.Fatalf("hold %q is not found", h.id)
		}
	}
	if x.get("zzzzzzzzzzzzzzzzzzzz") != nil || x.get("") != nil || x.len() != 3 {
		t.Fatalf("unknown ids found, or %d holds", x.len())
	}
	x.remove(mine)
	if x.get(mine.id) != nil || x.get(same.id) != same || x.len() != 2 || len(x.free) != 1 {
		t.Fatalf("after removing %q: %d holds, %d free slots", mine.id, x.len(), len(x.free))
	}
	x.remove(same)
	x.remove(plain)
	if x.len() != 0 || x.slots != nil || x.others != nil || x.free != nil {
		t.Fatalf("empty index keeps %d slots, %d others, %d free", len(x.slots), len(x.others), len(x.free))
	}
}

// TestSlotOf: slotOf reads the slot of every id reserve makes, whatever
// its random part, and no slot from an id that is not one.
func TestSlotOf(t *testing.T) {
	for _, slot := range []uint32{0, 1, 31, 32, 1 << 20, 1<<32 - 1} {
		for _, tail := range []byte{0, 0x5a, 0xff} {
			var b [12]byte
			binary.BigEndian.PutUint32(b[:4], slot)
			for i := 4; i < 12; i++ {
				b[i] = tail
			}
			var id [20]byte
			idEncoding.Encode(id[:], b[:])
			if got, ok := slotOf(string(id[:])); !ok || got != slot {
				t.Errorf("id %q: slot %d (%v), want %d", id, got, ok, slot)
			}
		}
	}
	for _, id := range []string{"", "aaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaa", "Aaaaaaaaaaaaaaaaaaaa", "aaaaaa1aaaaaaaaaaaaa", "aaaaaa=aaaaaaaaaaaaa"} {
		if slot, ok := slotOf(id); ok {
			t.Errorf("id %q names slot %d", id, slot)
		}
	}
}
