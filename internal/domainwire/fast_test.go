package domainwire

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzFastDecoders: the hand-written decoders accept exactly what Decode
// accepts, with the same result, and validate alike; names that hand
// back kept strings change nothing.
func FuzzFastDecoders(f *testing.F) {
	for _, s := range []string{
		`{"domain":"acme"}`, `{"domain":"a","copies":3,"min_copies":1,"client_id":"c"}`, ` { } `, `{"copies":-0}`, `{"copies":0,"min_copies":0}`, `{"min_copies":null}`, `{"copies":1,"copies":null}`,
		`{"domain":"a\u0062"}`, `{"Domain":"a"}`, `{"copies":1e3}`, `{"copies":01}`, `{"domain":"a","domain":"b"}`,
		`{"copies":9223372036854775808}`, `{"copies":-9223372036854775808}`, `{"copies":999999999999999999}`, `{"copies":1000000000000000000}`,
		`{"domain":"é"}`, "{\"domain\":\"\xff\"}", `{"domain":null}`, `{"x":1}`, `[]`, `{"domain":"a"} x`,
		`{"client_id":"c","hold_id":"h","copies":2}`, `{"hold_id":"h"}`, `{"Hold_ID":"h","client_id":"c"}`, `{"hold_id":"h","copies":null}`, ``, ` `,
	} {
		f.Add([]byte(s))
	}
	names := keptNames()
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, interned, strict Request
		ef, ei, es := DecodeRequest(data, &fast), DecodeRequestNames(data, &interned, names), Decode(data, &strict)
		if (ef == nil) != (es == nil) || (ei == nil) != (es == nil) || ef == nil && (fast != strict || interned != strict) {
			t.Fatalf("request %q: fast %+v %v, interned %+v %v, strict %+v %v", data, fast, ef, interned, ei, strict, es)
		}
		if ef == nil {
			sameValidation(t, data, &fast, &strict)
		}
		var rf, ri, rs Reserve
		ef, ei, es = DecodeReserve(data, &rf), DecodeReserveNames(data, &ri, names), Decode(data, &rs)
		if (ef == nil) != (es == nil) || (ei == nil) != (es == nil) || ef == nil && (rf != rs || ri != rs) {
			t.Fatalf("reserve %q: fast %+v %v, interned %+v %v, strict %+v %v", data, rf, ef, ri, ei, rs, es)
		}
		if ef == nil {
			sameValidation(t, data, &rf, &rs)
		}
		// A release decodes into a message a previous one left.
		lf, li := Release{ClientID: "old", HoldID: "old", Copies: 9}, Release{HoldID: "x"}
		var ls Release
		ef, ei, es = DecodeRelease(data, &lf, nil), DecodeRelease(data, &li, names), Decode(data, &ls)
		if (ef == nil) != (es == nil) || (ei == nil) != (es == nil) || ef == nil && (lf != ls || li != ls) {
			t.Fatalf("release %q: fast %+v %v, interned %+v %v, strict %+v %v", data, lf, ef, li, ei, ls, es)
		}
		if ef == nil {
			sameValidation(t, data, &lf, &ls)
		}
	})
}

// sameValidation checks that two decoded bodies validate alike, to the
// same values.
func sameValidation[T comparable, P interface {
	*T
	Validate() error
}](t *testing.T, data []byte, fast, strict P) {
	t.Helper()
	ef, es := fast.Validate(), strict.Validate()
	if (ef == nil) != (es == nil) || ef != nil && ef.Error() != es.Error() || *fast != *strict {
		t.Fatalf("%q validates as %+v %v by the fast decoder, %+v %v by the strict one", data, *fast, ef, *strict, es)
	}
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
		sealed := res
		sealed.HoldID, sealed.Seal = "not read", "not read either"
		if !Plain(id) || !Plain(seal) {
			return // AppendReserveReplySealed writes plain ids and seals only
		}
		if got := AppendReserveReplySealed(nil, &sealed, []byte(id), []byte(seal)); string(got) != string(want) {
			t.Fatalf("reserve reply with its id and seal as bytes:\n got %s\nwant %s", got, want)
		}
	})
}

// FuzzFastRefresh: DecodeRefresh accepts exactly what Decode accepts,
// with the same result (nil and empty lists told apart), and both
// validate alike.
func FuzzFastRefresh(f *testing.F) {
	for _, s := range []string{
		`{"client_id":"c","holds":[{"hold_id":"h1","domain":"d","groups":["g1","g2"],"copies":2,"seal":"2.17.abc"},{"hold_id":"h2","domain":"d","groups":[],"copies":1}]}`,
		`{"client_id":"c","holds":[]}`, `{"client_id":"c","holds":null}`, `{"client_id":"c"}`, `{}`, ` { "holds" : [ { } ] } `,
		`{"client_id":"c","holds":[{"hold_id":"h","domain":"d","groups":null,"copies":1}]}`,
		`{"client_id":"c","client_id":"d"}`, `{"holds":[],"holds":[{"hold_id":"x"}]}`, `{"holds":[{"hold_id":"a","hold_id":"b"}]}`,
		`{"holds":[{"groups":["a"],"groups":["b","c"]}]}`, `{"holds":[{"copies":1.0}]}`, `{"holds":[{"Copies":1}]}`, `{"holds":[{"x":1}]}`,
		`{"holds":[{"hold_id":"h","hold_id":"h"}]}`, `{"holds":[{"hold_id":"h","domain":"d","copies":1},{"hold_id":"h","domain":"d","copies":1}]}`,
		`{"holds":[{"domain":"a\u0062"}]}`, `{"holds":[1]}`, `{"holds":[{}],}`, `{"holds":[{},]}`, `{"client_id":"c"} {}`, ``,
	} {
		f.Add([]byte(s))
	}
	names := keptNames()
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, interned := Refresh{ClientID: "old", Holds: []Hold{{HoldID: "old"}}}, Refresh{}
		var strict Refresh
		ef, ei, es := DecodeRefresh(data, &fast, nil), DecodeRefresh(data, &interned, names), Decode(data, &strict)
		if (ef == nil) != (es == nil) || (ei == nil) != (es == nil) || ef == nil && (!reflect.DeepEqual(fast, strict) || !reflect.DeepEqual(interned, strict)) {
			t.Fatalf("refresh %q: fast %#v %v, interned %#v %v, strict %#v %v", data, fast, ef, interned, ei, strict, es)
		}
		if ef == nil {
			vf, vs := fast.Validate(), strict.Validate()
			if (vf == nil) != (vs == nil) || vf != nil && vf.Error() != vs.Error() {
				t.Fatalf("refresh %q validates as %v by the fast decoder, %v by the strict one", data, vf, vs)
			}
		}
	})
}

// keptNames is a Names that hands back the string it made before for the
// same bytes, as a server's does.
func keptNames() Names {
	kept := map[string]string{}
	return func(b []byte) string {
		if s, ok := kept[string(b)]; ok {
			return s
		}
		s := string(b)
		kept[s] = s
		return s
	}
}

// TestStringsByWords: a byte that must be escaped, ends a string or is
// not ASCII is seen wherever it falls in the eight-byte words
// appendString and scanString read, as a byte at a time sees it.
func TestStringsByWords(t *testing.T) {
	for _, special := range []string{`"`, `\`, "<", ">", "&", "\x1f", "\x00", "\x7f", "é", "\u2028", "\xff", " "} {
		for at := range 26 {
			s := "abcdefghijklmnopqrstuvwxyz"[:at] + special + "0123456789"
			want, _ := json.Marshal(s)
			if got := appendString(nil, s); string(got) != string(want) {
				t.Errorf("appendString(%q) = %s, want %s", s, got, want)
			}
			if got := appendString(nil, []byte(s)); string(got) != string(want) {
				t.Errorf("appendString([]byte(%q)) = %s, want %s", s, got, want)
			}
			for _, tail := range []string{"", `","copies":1}`} { // the string last in the buffer, or not
				in := []byte(`"` + s + `"` + tail)
				got, end, ok := scanString(in, 0)
				want, wantEnd, wantOK := scanBytewise(in)
				if string(got) != string(want) || end != wantEnd || ok != wantOK {
					t.Errorf("scanString(%q) = %q %d %v, byte by byte %q %d %v", in, got, end, ok, want, wantEnd, wantOK)
				}
			}
			body := []byte(`{"domain":"` + s + `","copies":1}`)
			var fast, strict Request
			ferr, serr := DecodeRequest(body, &fast), Decode(body, &strict)
			if (ferr == nil) != (serr == nil) || fast != strict {
				t.Errorf("body %q: decoded %+v (%v), strictly %+v (%v)", body, fast, ferr, strict, serr)
			}
		}
	}
}

// scanBytewise is scanString at 0 as it was, a byte at a time.
func scanBytewise(b []byte) ([]byte, int, bool) {
	ascii := true
	for j := 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			if !ascii && !utf8.Valid(b[1:j]) {
				return nil, 0, false
			}
			return b[1:j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, 0, false
}
