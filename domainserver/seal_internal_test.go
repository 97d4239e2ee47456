package domainserver

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/domainwire"
)

// FuzzCheckSeal: no listed seal but the one made for the hold verifies,
// and none makes checkSeal fail other than with errSeal.
func FuzzCheckSeal(f *testing.F) {
	s := &Server{sealKey: []byte("0123456789abcdef0123456789abcdef"), opts: Options{SealTTL: time.Hour}}
	now := time.Unix(1_800_000_000, 0)
	genuine := s.seal("h1", &holdKey{clientID: "c1", res: &resource{ns: "app", name: "sandbox"}, domain: "a", groups: []string{"free"}}, 3, now)
	f.Add(genuine)
	f.Add("3.1800003600000.AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("..")
	f.Add("-1.-1.")
	f.Fuzz(func(t *testing.T, seal string) {
		l := domainwire.Hold{HoldID: "h1", Domain: "a", Groups: []string{"free"}, Copies: 3, Seal: seal}
		_, err := s.checkSeal(&l, "c1", "app", "sandbox", now)
		if (err == nil) != (seal == genuine) {
			t.Fatalf("seal %q: %v", seal, err)
		}
	})
}

// TestSealIsCanonical: a seal verifies only as the server wrote it.
func TestSealIsCanonical(t *testing.T) {
	s := &Server{sealKey: []byte("0123456789abcdef0123456789abcdef"), opts: Options{SealTTL: time.Hour}}
	now := time.Unix(1_800_000_000, 0)
	genuine := s.seal("h1", &holdKey{clientID: "c1", res: &resource{ns: "app", name: "sandbox"}, domain: "a"}, 3, now)
	parts := strings.Split(genuine, ".")
	last := parts[2][len(parts[2])-1]
	flip := map[byte]byte{'A': 'B', 'B': 'A'}[last]
	if flip == 0 {
		flip = last ^ 1 // another letter or digit of the same group
	}
	for _, seal := range []string{genuine, "0" + genuine, "+" + genuine, parts[0] + ".0" + parts[1] + "." + parts[2],
		parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-1] + string(flip)} {
		l := domainwire.Hold{HoldID: "h1", Domain: "a", Copies: 3, Seal: seal}
		if _, err := s.checkSeal(&l, "c1", "app", "sandbox", now); (err == nil) != (seal == genuine) {
			t.Errorf("seal %q: %v", seal, err)
		}
	}
}

// TestLegacySealAdopted: a seal an earlier version made (HMAC-SHA256)
// still vouches for its hold, so a rolling upgrade loses no holds; a
// legacy seal of other copies does not.
func TestLegacySealAdopted(t *testing.T) {
	for _, key := range []string{"0123456789abcdef0123456789abcdef", "a key of another length than 32"} {
		s := &Server{sealKey: []byte(key), opts: Options{SealTTL: time.Hour}}
		now := time.Unix(1_800_000_000, 0)
		expires := now.Add(time.Hour).UnixMilli()
		mac := s.legacySealMAC("h1", "c1", "app", "sandbox", "a", nil, 3, expires)
		legacy := "3." + strconv.FormatInt(expires, 10) + "." + base64.RawURLEncoding.EncodeToString(mac)
		if legacy == s.seal("h1", &holdKey{clientID: "c1", res: &resource{ns: "app", name: "sandbox"}, domain: "a"}, 3, now) {
			t.Fatalf("key %q: the legacy seal is the current one", key)
		}
		l := domainwire.Hold{HoldID: "h1", Domain: "a", Copies: 3, Seal: legacy}
		if n, err := s.checkSeal(&l, "c1", "app", "sandbox", now); err != nil || n != 3 {
			t.Errorf("key %q: legacy seal: %d, %v", key, n, err)
		}
		l.Seal = "4." + strconv.FormatInt(expires, 10) + "." + base64.RawURLEncoding.EncodeToString(mac)
		if _, err := s.checkSeal(&l, "c1", "app", "sandbox", now); err == nil {
			t.Errorf("key %q: a legacy seal vouched for other copies", key)
		}
	}
}

// TestIDAndSealArePlain: a hold's own id and its seal need no escaping
// in JSON, as domainwire.AppendReserveReplySealed writes them unchecked.
func TestIDAndSealArePlain(t *testing.T) {
	s := &Server{sealKey: newSealKey(), opts: Options{SealTTL: time.Hour}}
	for _, slot := range []uint32{0, 1, 1<<32 - 1} {
		for _, random := range []uint64{0, 0x5a5a5a5a5a5a5a5a, 1<<64 - 1} {
			var id [20]byte
			ownID(&id, slot, random)
			if !domainwire.Plain(id[:]) {
				t.Errorf("id %q is not plain", id)
			}
		}
	}
	for _, copies := range []int64{0, 1, -1, 1<<63 - 1, -1 << 63} {
		for _, now := range []time.Time{time.Unix(0, 0), time.Unix(-1<<40, 0), time.Unix(1<<40, 0)} {
			if seal := s.seal("h", &holdKey{res: &resource{}}, copies, now); !domainwire.Plain(seal) {
				t.Errorf("seal %q is not plain", seal)
			}
		}
	}
}
