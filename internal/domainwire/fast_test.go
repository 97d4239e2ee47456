package domainwire

import (
	"encoding/json"
	"testing"
)

// FuzzFastDecoders: the hand-written decoders accept exactly what Decode
// accepts, with the same result.
func FuzzFastDecoders(f *testing.F) {
	for _, s := range []string{
		`{"domain":"acme"}`, `{"domain":"a","copies":3,"min_copies":1,"client_id":"c"}`, ` { } `, `{"copies":-0}`, `{"copies":0,"min_copies":0}`, `{"min_copies":null}`, `{"copies":1,"copies":null}`,
		`{"domain":"a\u0062"}`, `{"Domain":"a"}`, `{"copies":1e3}`, `{"copies":01}`, `{"domain":"a","domain":"b"}`,
		`{"copies":9223372036854775808}`, `{"domain":"é"}`, "{\"domain\":\"\xff\"}", `{"domain":null}`, `{"x":1}`, `[]`, `{"domain":"a"} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, strict Request
		ef, es := DecodeRequest(data, &fast), Decode(data, &strict)
		if (ef == nil) != (es == nil) || ef == nil && fast != strict {
			t.Fatalf("request %q: fast %+v %v, strict %+v %v", data, fast, ef, strict, es)
		}
		var rf, rs Reserve
		ef, es = DecodeReserve(data, &rf), Decode(data, &rs)
		if (ef == nil) != (es == nil) || ef == nil && rf != rs {
			t.Fatalf("reserve %q: fast %+v %v, strict %+v %v", data, rf, ef, rs, es)
		}
	})
}

// FuzzFastEncoders: the hand-written encoders write what json.Marshal
// writes.
func FuzzFastEncoders(f *testing.F) {
	f.Add(int64(3), "k3v", "free", "", true, false, int64(-1))
	f.Add(int64(0), "", "a<b", "é\u2028", false, true, int64(0))
	f.Fuzz(func(t *testing.T, n int64, id, g1, g2 string, b1, b2 bool, lim int64) {
		fail := ""
		if b1 {
			fail = g1
		}
		rr := RateReply{Granted: n, HardLimit: lim, GlobalLimit: -1, TierLimit: n / 2, DomainHitsLastSecond: n, Tier: int(n % 5),
			Burst: b1, HardLimited: b2, Ignored: b1 && b2, Unconfigured: b2, Fail: fail}
		want, _ := json.Marshal(&rr)
		if got := AppendRateReply(nil, &rr); string(got) != string(want) {
			t.Fatalf("rate reply:\n got %s\nwant %s", got, want)
		}
		var groups []string
		var gh []GroupHolds
		if g1 != "" {
			groups = []string{g1, g2}
			gh = []GroupHolds{{Name: g1, Limit: lim, Holds: n}, {Name: g2}}
		} else if b1 {
			groups, gh = []string{}, []GroupHolds{}
		}
		seal := ""
		if b2 {
			seal = g2 + id
		}
		var share *Share
		switch {
		case b2 && g1 != "":
			share = &Share{Domain: n, Global: lim, Groups: []GroupShare{{Name: g1, Share: n}, {Name: g2, Share: -1}}}
		case b2:
			share = &Share{Domain: -1, Global: n, Groups: []GroupShare{}}
		}
		res := ReserveReply{Granted: n, HoldID: id, Seal: seal, Groups: groups, GroupHolds: gh, DomainLimit: lim, TTLMillis: 10000,
			Learning: b1, RetryAfterMillis: n, Ignored: b2, Unconfigured: b1, Fail: fail, Share: share}
		want, _ = json.Marshal(&res)
		if got := AppendReserveReply(nil, &res); string(got) != string(want) {
			t.Fatalf("reserve reply:\n got %s\nwant %s", got, want)
		}
	})
}
