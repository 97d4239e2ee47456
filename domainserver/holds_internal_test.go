package domainserver

import (
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

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
// them (the store's chunks, keys and the kept names), and one sweep
// expires them all however many there are.
func TestMemoryFollowsLiveHolds(t *testing.T) {
	s, now := clockServer(t)
	const n = 5 * sweepChunk
	ids := map[string]bool{}
	for i := range n {
		ids[reserveReply(t, s, "d"+strconv.Itoa(i%7), "c"+strconv.Itoa(i%5)).HoldID] = true
	}
	if len(ids) != n || s.holds.len() != n || s.holds.used != n || len(s.holds.others) != 0 || len(poolKeys(s)) != 7*5 {
		t.Fatalf("%d holds made: %d distinct ids, %d held, %d slots, %d others, %d keys", n, len(ids), s.holds.len(),
			s.holds.used, len(s.holds.others), len(poolKeys(s)))
	}
	if len(s.kept) != 7+5 {
		t.Fatalf("%d names kept, want the 7 domains and 5 clients", len(s.kept))
	}
	// A release keeps no name of its own: a hold id is one hold's.
	gone := s.holds.at(n / 2)
	goneID, goneClient := s.holds.id(gone), s.holds.key(gone).clientID
	rel := &fakeRequest{subject: domainwire.Subject("root", domainwire.OpRelease, "ns", "pool"),
		data: []byte(`{"client_id":"` + goneClient + `","hold_id":"` + goneID + `"}`)}
	s.handle(rel)
	if string(rel.out) != `{"remaining":0}` || s.holds.len() != n-1 || len(s.kept) != 7+5 || s.holds.get(goneID) != nil {
		t.Fatalf("release of %s: %s; %d holds left, %d names kept", goneID, rel.out, s.holds.len(), len(s.kept))
	}
	// Its slot goes to the next hold, under another id.
	next := reserveReply(t, s, "d0", "c0").HoldID
	if h := s.holds.at(n / 2); !h.live || s.holds.id(h) != next || next == goneID || s.holds.used != n {
		t.Fatalf("a reserve after a release: hold %s, %d slots", next, s.holds.used)
	}
	ids[next] = true
	delete(ids, goneID)
	// Holds of one client and domain share their key.
	keys := map[string]uint32{}
	s.holds.all(func(h *hold) {
		k := s.holds.key(h)
		name := k.clientID + "/" + k.domain
		if i, ok := keys[name]; ok && i != h.key {
			t.Fatalf("holds of %s have keys %d and %d", name, i, h.key)
		}
		keys[name] = h.key
		if id := s.holds.id(h); s.holds.get(id) != h || !ids[id] {
			t.Fatalf("hold %s is not found by its id", id)
		}
	})
	*now = now.Add(time.Second) // not past the expiry yet
	s.Expire()
	if s.holds.len() != n {
		t.Fatalf("%d holds left at their expiry, want %d", s.holds.len(), n)
	}
	*now = now.Add(time.Nanosecond)
	s.Expire()
	if s.holds.len() != 0 || s.holds.first() != nil || s.counts.Expired != n {
		t.Fatalf("after the expiry: %d holds, %d expired", s.holds.len(), s.counts.Expired)
	}
	if s.holds.chunks != nil || s.holds.free != nil || s.holds.keys != nil || poolKeys(s) != nil || s.kept != nil {
		t.Fatalf("after the expiry: %d chunks, %d free slots, %d keys and %d names are still kept", len(s.holds.chunks), len(s.holds.free),
			len(s.holds.keys), len(s.kept))
	}
	reserveReply(t, s, "d0", "c0") // and it serves on
	if s.holds.len() != 1 || s.holds.used != 1 {
		t.Fatalf("a reserve after the sweep: %d holds, %d slots", s.holds.len(), s.holds.used)
	}
}

// poolKeys returns the named holdKeys of resource ns:pool.
func poolKeys(s *Server) map[string]uint32 {
	if r := s.resources["ns/pool"]; r != nil {
		return r.keys
	}
	return nil
}

// TestHoldStoreForeignIDs: holds whose id this server did not make (a
// predecessor's, adopted from a refresh; a seize's) are found by their
// whole id, even one that names a slot another hold has; holds keep
// their expiry order through removals.
func TestHoldStoreForeignIDs(t *testing.T) {
	var x holdStore
	r := &resource{ns: "ns", name: "pool"}
	mine := x.add("", "c", r, "d", nil)
	mineID := x.id(mine)
	slot, ok := slotOf(mineID)
	if !ok || slot != 0 {
		t.Fatalf("first id %q names slot %d (%v), want 0", mineID, slot, ok)
	}
	// Slot 0 too, with other random bytes: a predecessor's id.
	var enc [20]byte
	ownID(&enc, 0, mine.random^1)
	same := x.add(string(enc[:]), "c", r, "d", []string{"g"})
	plain := x.add("not-one-of-ours", "c2", r, "d", nil)
	byID := map[string]*hold{mineID: mine, string(enc[:]): same, "not-one-of-ours": plain}
	for id, h := range byID {
		if x.get(id) != h || x.id(h) != id {
			t.Fatalf("hold %q is not found", id)
		}
	}
	if x.get("zzzzzzzzzzzzzzzzzzzz") != nil || x.get("") != nil || x.len() != 3 || len(x.keys) != 3 {
		t.Fatalf("unknown ids found, or %d holds, %d keys", x.len(), len(x.keys))
	}
	if x.first() != mine {
		t.Fatal("the first hold added is not the first to expire")
	}
	x.moveToBack(mine)
	if x.first() != same {
		t.Fatal("the hold moved to the back is still the first to expire")
	}
	x.remove(same)
	if x.get(mineID) != mine || x.get(string(enc[:])) != nil || x.len() != 2 || len(x.free) != 1 || x.first() != plain {
		t.Fatalf("after removing %q: %d holds, %d free slots", enc, x.len(), len(x.free))
	}
	x.remove(mine)
	x.remove(plain)
	if x.len() != 0 || x.chunks != nil || x.others != nil || x.free != nil || x.keys != nil || r.keys != nil || x.first() != nil {
		t.Fatalf("empty store keeps %d chunks, %d others, %d free, %d keys", len(x.chunks), len(x.others), len(x.free), len(x.keys))
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

// TestHoldStoreRedrawsATakenID: an id the store draws that a foreign
// hold already has (one chance in 2^64) is drawn again.
func TestHoldStoreRedrawsATakenID(t *testing.T) {
	var x holdStore
	r := &resource{ns: "ns", name: "pool"}
	var taken, next [20]byte
	ownID(&taken, 1, 0) // the id the next own hold draws first: slot 1, random 0
	ownID(&next, 1, 1)
	x.add(string(taken[:]), "c", r, "d", nil) // slot 0
	x.spent = 8                               // the next random8 reads bytes 8–16 (0), then 16–24 (1)
	x.random[23] = 1
	h := x.add("", "c", r, "d", nil)
	if id := x.id(h); id != string(next[:]) || x.get(id) != h || x.get(string(taken[:])) == h || x.len() != 2 || len(x.free) != 0 {
		t.Fatalf("the own hold has id %q (want %q), %d holds, %d free slots", id, next, x.len(), len(x.free))
	}
}
