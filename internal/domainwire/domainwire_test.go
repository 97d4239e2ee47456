package domainwire

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	long := strings.Repeat("x", MaxDomainLen+1)
	cases := []struct {
		name string
		v    interface{ Validate() error }
		ok   bool
	}{
		{"request defaults", &Request{Domain: "acme"}, true},
		{"request empty domain", &Request{}, false},
		{"request space in domain", &Request{Domain: "a b"}, false},
		{"request long domain", &Request{Domain: long}, false},
		{"request non-ASCII domain", &Request{Domain: "zürich-東京"}, true},
		{"request invalid UTF-8 domain", &Request{Domain: "a\xffb"}, false},
		{"reserve no-break space in client", &Reserve{Domain: "a", ClientID: "c\u00a0d"}, false},
		{"release line separator in hold", &Release{ClientID: "c", HoldID: "h\u2028"}, false},
		{"request negative copies", &Request{Domain: "a", Copies: -1}, false},
		{"request huge copies", &Request{Domain: "a", Copies: MaxCopies + 1}, false},
		{"request min above copies", &Request{Domain: "a", Copies: 2, MinCopies: 3}, false},
		{"request min negative", &Request{Domain: "a", Copies: 2, MinCopies: -1}, false},
		{"reserve needs client", &Reserve{Domain: "a"}, false},
		{"reserve", &Reserve{Domain: "a", ClientID: "c", Copies: 3, MinCopies: 1}, true},
		{"release", &Release{ClientID: "c", HoldID: "h"}, true},
		{"release negative", &Release{ClientID: "c", HoldID: "h", Copies: -2}, false},
		{"release no hold", &Release{ClientID: "c"}, false},
		{"refresh empty", &Refresh{ClientID: "c"}, true},
		{"refresh dup", &Refresh{ClientID: "c", Holds: []Hold{{HoldID: "h", Domain: "d", Copies: 1}, {HoldID: "h", Domain: "d", Copies: 1}}}, false},
		{"refresh zero copies", &Refresh{ClientID: "c", Holds: []Hold{{HoldID: "h", Domain: "d"}}}, false},
		{"refresh bad group", &Refresh{ClientID: "c", Holds: []Hold{{HoldID: "h", Domain: "d", Copies: 1, Groups: []string{""}}}}, false},
		{"seize", &Seize{ClientID: "c", TransferID: "ns.r.x"}, true},
		{"seize no id", &Seize{ClientID: "c"}, false},
	}
	for _, c := range cases {
		err := c.v.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok = %v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v does not wrap ErrBadRequest", c.name, err)
		}
	}
	r := Request{Domain: "a", Copies: 5}
	if err := r.Validate(); err != nil || r.MinCopies != 5 {
		t.Errorf("min_copies defaults to copies: %+v %v", r, err)
	}
}

// TestExplicitCounts: a body that leaves copies or min_copies out gets
// the defaults; one that names them is taken at its word, through both
// decoders: copies 0 is a bad request, min_copies 0 the range [0, copies].
// A null is a field left out, and so is a Go value's 0.
func TestExplicitCounts(t *testing.T) {
	cases := []struct {
		body        string
		copies, min int64
		ok          bool
	}{
		{`{"domain":"a"}`, 1, 1, true},
		{`{"domain":"a","copies":5}`, 5, 5, true},
		{`{"domain":"a","copies":5,"min_copies":0}`, 5, 0, true},
		{`{"domain":"a","min_copies":0}`, 1, 0, true},
		{`{"domain":"a","copies":null,"min_copies":null}`, 1, 1, true},
		{`{"domain":"a","copies":0}`, 0, 0, false},
		{`{"domain":"a","copies":-0}`, 0, 0, false},
		{`{"domain":"a","copies":0,"min_copies":0}`, 0, 0, false},
		{`{"domain":"a","copies":5,"min_copies":-1}`, 0, 0, false},
	}
	for _, c := range cases {
		for name, decode := range map[string]func([]byte) (int64, int64, error){
			"request": func(b []byte) (int64, int64, error) {
				var r Request
				if err := DecodeRequest(b, &r); err != nil {
					return 0, 0, err
				}
				err := r.Validate()
				return r.Copies, r.MinCopies, err
			},
			"reserve": func(b []byte) (int64, int64, error) {
				var r Reserve
				if err := Decode(b, &r); err != nil {
					return 0, 0, err
				}
				r.ClientID = "c"
				err := r.Validate()
				return r.Copies, r.MinCopies, err
			},
		} {
			copies, min, err := decode([]byte(c.body))
			if (err == nil) != c.ok || c.ok && (copies != c.copies || min != c.min) {
				t.Errorf("%s %s: copies %d, min_copies %d, %v; want %d, %d, ok %v", name, c.body, copies, min, err, c.copies, c.min, c.ok)
			}
			if err != nil && !errors.Is(err, ErrBadRequest) {
				t.Errorf("%s %s: %v does not wrap ErrBadRequest", name, c.body, err)
			}
		}
	}
	r := Request{Domain: "a"}
	if err := r.Validate(); err != nil || r.Copies != 1 || r.MinCopies != 1 {
		t.Errorf("a Go value's zero counts are the defaults: %+v %v", r, err)
	}
}

func TestTransferValidate(t *testing.T) {
	for _, c := range []struct {
		ttl string
		ok  bool
	}{{"", true}, {"30s", true}, {"0s", false}, {"-1s", false}, {"25h", false}, {"soon", false}} {
		_, err := (&Transfer{ClientID: "c", HoldID: "h", TTL: c.ttl}).Validate()
		if (err == nil) != c.ok {
			t.Errorf("ttl %q: %v", c.ttl, err)
		}
	}
}

func TestSubjects(t *testing.T) {
	s := Subject("root", OpReserve, "jobs", "sandbox")
	op, ns, res, err := ParseSubject(s)
	if err != nil || op != OpReserve || ns != "jobs" || res != "sandbox" {
		t.Fatalf("ParseSubject(%s) = %s %s %s %v", s, op, ns, res, err)
	}
	op, ns, res, err = ParseSubject(PartitionSubject("root", 3) + ".seize.jobs.sandbox")
	if err != nil || op != OpSeize || ns != "jobs" || res != "sandbox" {
		t.Fatalf("partitioned: %s %s %s %v", op, ns, res, err)
	}
	for _, c := range []struct{ subject, tenant string }{
		{Subject("root", OpRelease, "jobs", "sandbox"), ""},
		{TenantSubject("TENANT_A", "root", OpRelease, "jobs", "sandbox"), "TENANT_A"},
		{PartitionSubject("root", 2) + ".t.TENANT_B.release.jobs.sandbox", "TENANT_B"},
	} {
		tenant, op, ns, res, err := ParseTenantSubject(c.subject)
		if err != nil || tenant != c.tenant || op != OpRelease || ns != "jobs" || res != "sandbox" {
			t.Errorf("ParseTenantSubject(%s) = %q %s %s %s %v", c.subject, tenant, op, ns, res, err)
		}
	}
	for _, bad := range []string{"allot.t..root.domain.reserve.jobs.sandbox", "allot.root.domain.p.1.t..reserve.jobs.sandbox",
		"allot.root.domain.p.1.x.T.reserve.jobs.sandbox", "allot.t.T.root.domain.reserve.jobs.sandbox.x",
		"allot.root.domain.reserve.jobs", "allot.root.domain.p.1.reserve.jobs.sandbox.extra", "allot.root.domain.reserve.jobs.sandbox.extra", "allot.root.quota.take.a.b", "allot.root.domain.reserve.j*bs.x"} {
		if _, _, _, err := ParseSubject(bad); err == nil {
			t.Errorf("ParseSubject(%s) accepted", bad)
		}
	}
	if ns, res, err := TransferResource("jobs.sandbox.abc.def"); err != nil || ns != "jobs" || res != "sandbox" {
		t.Errorf("TransferResource: %s %s %v", ns, res, err)
	}
	if _, _, err := TransferResource("nodots"); err == nil {
		t.Error("TransferResource accepted an id without resource")
	}
	if got := len(Mappings("root", 4)); got != 2 {
		t.Errorf("Mappings: %d, want 2 (plain and tenant subjects, every operation)", got)
	}
}

func TestDecodeStrict(t *testing.T) {
	var r Request
	for _, bad := range []string{`{"domain":"a","bogus":1}`, `{"domain":"a"} {}`, `{"copies":"x"}`, `[`, `{"copies":1e400}`,
		`{"domain":"a","domain":"b"}`, `{"domain":"a","DOMAIN":"b"}`, `{"copies":1,"copie\u017f":2}`} {
		if err := Decode([]byte(bad), &r); err == nil || !errors.Is(err, ErrBadRequest) {
			t.Errorf("Decode(%s) = %v", bad, err)
		}
	}
	if err := Decode(nil, &Seize{}); err != nil {
		t.Errorf("empty body: %v", err)
	}
}

func FuzzDecodeValidate(f *testing.F) {
	f.Add([]byte(`{"domain":"acme","copies":3,"min_copies":1}`))
	f.Add([]byte(`{"client_id":"c","holds":[{"hold_id":"h","domain":"d","copies":2,"groups":["g"]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if Decode(data, &r) == nil && r.Validate() == nil {
			if r.Copies < 1 || r.MinCopies < 0 || r.MinCopies > r.Copies || r.Copies > MaxCopies {
				t.Fatalf("valid request out of range: %+v", r)
			}
		}
		var rf Refresh
		if Decode(data, &rf) == nil {
			_ = rf.Validate()
		}
	})
}

// FuzzParseTenantSubject: the one-pass tokenizer cuts every subject as
// strings.Cut token by token did (cutTokens), ten tokens at most.
func FuzzParseTenantSubject(f *testing.F) {
	for _, s := range []string{"allot.root.domain.reserve.ns.pool", "allot.t.acme.root.domain.request.ns.api", "allot.root.domain.p.3.t.acme.seize.ns.r",
		"", ".", "a.b.c.d.e.f.g.h.i.j", "a.b.c.d.e.f.g.h.i.j.", "a.b.c.d.e.f.g.h.i.j.k", "allot.root.domain.p.3.t.acme.seize.ns.r.", "allot..domain.x.y.z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		tenant, op, ns, res, err := ParseTenantSubject(subject)
		wt, wo, wn, wr, werr := cutTokens(subject)
		if tenant != wt || op != wo || ns != wn || res != wr || (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("ParseTenantSubject(%q) = %q %q %q %q %v, cut token by token %q %q %q %q %v", subject, tenant, op, ns, res, err, wt, wo, wn, wr, werr)
		}
	})
}

// cutTokens is ParseTenantSubject as it was, cutting with strings.Cut.
func cutTokens(subject string) (tenant, op, namespace, resource string, err error) {
	var t [10]string
	n, rest := 0, subject
	for n < len(t) {
		tok, after, more := strings.Cut(rest, ".")
		t[n], rest = tok, after
		n++
		if !more {
			break
		}
	}
	switch {
	case rest != "" && n == len(t):
	case t[0] != "allot":
	case n == 8 && t[1] == "t" && t[4] == "domain":
		if t[2] != "" {
			tenant, op, namespace, resource = t[2], t[5], t[6], t[7]
		}
	case n == 10 && t[2] == "domain" && t[3] == "p" && t[5] == "t":
		if t[6] != "" {
			tenant, op, namespace, resource = t[6], t[7], t[8], t[9]
		}
	case n == 6 && t[2] == "domain":
		op, namespace, resource = t[3], t[4], t[5]
	case n == 8 && t[2] == "domain" && t[3] == "p":
		op, namespace, resource = t[5], t[6], t[7]
	}
	if op == "" {
		return "", "", "", "", badf("subject %q is not allot.<node>.domain.<op>.<namespace>.<resource>", clip(subject))
	}
	if err := ValidateName("namespace", namespace); err != nil {
		return "", "", "", "", err
	}
	if err := ValidateName("resource", resource); err != nil {
		return "", "", "", "", err
	}
	return tenant, op, namespace, resource, nil
}
