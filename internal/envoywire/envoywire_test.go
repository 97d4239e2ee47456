package envoywire

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

func TestToken(t *testing.T) {
	for _, tc := range []struct{ domain, want string }{
		{"edge", "edge"},
		{"Mongo_CPS-1", "Mongo_CPS-1"},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
	} {
		if got := Token(tc.domain); got != tc.want {
			t.Errorf("Token(%q) = %q, want %q", tc.domain, got, tc.want)
		}
	}
	// Anything else is hashed into one valid token, the same each time.
	for _, d := range []string{"envoy.edge", "a b", "*", ">", "", strings.Repeat("a", 65), "ümlaut"} {
		tok := Token(d)
		if len(tok) != 17 || tok[0] != 'h' || !plainToken(tok) || Token(d) != tok {
			t.Errorf("Token(%q) = %q", d, tok)
		}
	}
	if Token("a.b") == Token("a_b") {
		t.Error("two domains hash to one token")
	}
}

// Partition agrees with the NATS server's mapping for every domain, so
// that a front end answering in process counts where a request over NATS
// would.
func TestPartitionMatchesMapping(t *testing.T) {
	const n = 5
	srv, err := embed.Start(embed.Options{StoreDir: t.TempDir(), Mappings: Mappings("root", n)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("allot.root.envoy.p.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	domains := []string{"edge", "api", "mongo_cps", "envoy.edge", "a b", "x", "y", "z", "tenant-7", "ümlaut", "w", "v"}
	seen := map[int]bool{}
	for _, d := range domains {
		if err := nc.Publish(CountSubject("root", d), nil); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		want := PartitionSubject("root", Partition(d, n)) + ".count." + Token(d)
		if m.Subject != want {
			t.Errorf("domain %q went to %s; Partition says %s", d, m.Subject, want)
		}
		seen[Partition(d, n)] = true
	}
	if len(seen) < 3 {
		t.Errorf("the domains fell on %d partitions of %d", len(seen), n)
	}
	if Partition("edge", 1) != 0 || len(Mappings("root", 1)) != 0 {
		t.Error("one partition needs no mapping")
	}
}

func TestDecode(t *testing.T) {
	valid := `{"domain":"edge","counters":[{"key":"edge_client_a_60","hits":1,"expires":120}]}`
	var req allotpb.EnvoyCountRequest
	if err := Decode(wire.JSON, []byte(valid), "edge", &req); err != nil || req.GetCounters()[0].GetHits() != 1 {
		t.Fatalf("valid request: %v", err)
	}
	bin, err := wire.Marshal(wire.Protobuf, &req)
	if err != nil {
		t.Fatal(err)
	}
	if err := Decode(wire.Protobuf, bin, "edge", new(allotpb.EnvoyCountRequest)); err != nil {
		t.Fatalf("binary request: %v", err)
	}
	for _, tc := range []struct {
		name, body, token, want string
	}{
		{"another token", valid, "api", `is counted on token "edge"`},
		{"unknown field", `{"domain":"edge","counters":[],"x":1}`, "edge", "unknown field"},
		{"no domain", `{"counters":[{"key":"k","expires":1}]}`, "", "domain is empty"},
		{"no counters", `{"domain":"edge"}`, "edge", "0 counters"},
		{"empty key", `{"domain":"edge","counters":[{"key":"","expires":1}]}`, "edge", "counters[0].key"},
		{"huge hits", `{"domain":"edge","counters":[{"key":"k","hits":"18446744073709551615","expires":1}]}`, "edge", "above 2^63-1"},
		{"read only with hits", `{"domain":"edge","read_only":true,"counters":[{"key":"k","hits":1,"expires":1}]}`, "edge", "read_only"},
		{"no expiry", `{"domain":"edge","counters":[{"key":"k","hits":1}]}`, "edge", "expires 0"},
		{"not JSON", `{`, "edge", "cannot decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Decode(wire.JSON, []byte(tc.body), tc.token, new(allotpb.EnvoyCountRequest))
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a bad request containing %q", err, tc.want)
			}
		})
	}
	unknown := append(append([]byte{}, bin...), 0xf8, 0x01, 0x01) // field 31, varint 1
	if err := Decode(wire.Protobuf, unknown, "edge", new(allotpb.EnvoyCountRequest)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("binary request with an unknown field: %v", err)
	}
	if err := Decode(wire.JSON, make([]byte, MaxRequest+1), "edge", new(allotpb.EnvoyCountRequest)); !errors.Is(err, wire.ErrTooLarge) {
		t.Errorf("oversized request: %v", err)
	}
	if Validate(&allotpb.EnvoyCountRequest{Domain: "d", Counters: []*allotpb.EnvoyCounter{{Key: "k", Hits: math.MaxInt64, Expires: 1}}}) != nil {
		t.Error("2^63-1 hits refused")
	}
}

// FuzzDecode: no input panics, and whatever decodes is valid.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"domain":"edge","counters":[{"key":"k","hits":1,"expires":120}]}`), false)
	f.Add([]byte{0x0a, 0x04, 'e', 'd', 'g', 'e'}, true)
	f.Fuzz(func(t *testing.T, data []byte, binary bool) {
		enc := wire.JSON
		if binary {
			enc = wire.Protobuf
		}
		var req allotpb.EnvoyCountRequest
		if err := Decode(enc, data, "edge", &req); err == nil {
			if Validate(&req) != nil || req.GetDomain() != "edge" {
				t.Fatalf("decoded an invalid request: %v", &req)
			}
		}
	})
}
