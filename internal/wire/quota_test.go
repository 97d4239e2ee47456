package wire

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/proto/allotpb"
)

func TestDecodeQuotaTake(t *testing.T) {
	pb := func(m *allotpb.QuotaTakeRequest) string {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	three := int64(3)
	for _, c := range []struct {
		enc  Encoding
		in   string
		want QuotaTake
		fast bool
	}{
		{JSON, `{"bucket":"logins:alice"}`, QuotaTake{Bucket: "logins:alice", Namespace: "logins", Name: "alice", Request: quota.Request{Tokens: 1, MaxWait: -1}}, true},
		{JSON, ` { "bucket" : "a:b", "tokens": 0, "max_wait": "0s", "client_id": "web-1", "criticality": "SHEDDABLE" } `,
			QuotaTake{Bucket: "a:b", Namespace: "a", Name: "b", Request: quota.Request{Tokens: 0, MaxWait: 0, ClientID: "web-1", Sheddable: true}}, true},
		{JSON, `{"maxWait":"1.5s","clientId":"c","tokens":500,"bucket":"A_1:b_2","criticality":"CRITICAL"}`,
			QuotaTake{Bucket: "A_1:b_2", Namespace: "A_1", Name: "b_2", Request: quota.Request{Tokens: 500, MaxWait: 1500 * time.Millisecond, ClientID: "c"}}, true},
		// Shapes only protojson reads: string int64, enum by number, escapes.
		{JSON, `{"bucket":"a:\u0062","tokens":"7","criticality":2,"max_wait":".5s"}`,
			QuotaTake{Bucket: "a:b", Namespace: "a", Name: "b", Request: quota.Request{Tokens: 7, MaxWait: 500 * time.Millisecond, Sheddable: true}}, false},
		{JSON, `{"bucket":"a:b","client_id":null}`, QuotaTake{Bucket: "a:b", Namespace: "a", Name: "b", Request: quota.Request{Tokens: 1, MaxWait: -1}}, false},
		// Go durations, as templates and namespaces write them.
		{JSON, `{"bucket":"a:b","max_wait":"500ms"}`, QuotaTake{Bucket: "a:b", Namespace: "a", Name: "b", Request: quota.Request{Tokens: 1, MaxWait: 500 * time.Millisecond}}, false},
		{JSON, `{"maxWait":"1m30s","bucket":"a:b","tokens":2}`, QuotaTake{Bucket: "a:b", Namespace: "a", Name: "b", Request: quota.Request{Tokens: 2, MaxWait: 90 * time.Second}}, false},
		{JSON, `{"bucket":"a:b","max_wait":"0"}`, QuotaTake{Bucket: "a:b", Namespace: "a", Name: "b", Request: quota.Request{Tokens: 1, MaxWait: 0}}, false},
		{Protobuf, pb(&allotpb.QuotaTakeRequest{Bucket: "a:b", Tokens: &three, MaxWait: durationpb.New(2 * time.Second), Criticality: allotpb.Criticality_SHEDDABLE}),
			QuotaTake{Bucket: "a:b", Namespace: "a", Name: "b", Request: quota.Request{Tokens: 3, MaxWait: 2 * time.Second, Sheddable: true}}, true},
	} {
		var got QuotaTake
		if err := DecodeQuotaTake(c.enc, []byte(c.in), &got); err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.in, got, c.want)
		}
		var r rawTake
		fast := decodeTakeFast([]byte(c.in), &r)
		if c.enc == Protobuf {
			fast = decodeTakeProtoFast([]byte(c.in), &r)
		}
		if fast != c.fast {
			t.Errorf("%s: fast path taken = %v, want %v", c.in, !c.fast, c.fast)
		}
	}
}

func TestDecodeQuotaTakeErrors(t *testing.T) {
	neg := int64(-1)
	unknown, _ := proto.Marshal(&allotpb.QuotaTakeRequest{Bucket: "a:b"})
	unknown = protowire.AppendTag(unknown, 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	negPB, _ := proto.Marshal(&allotpb.QuotaTakeRequest{Bucket: "a:b", Tokens: &neg})
	for _, c := range []struct {
		enc      Encoding
		in, want string
		tooLarge bool
	}{
		{JSON, ``, "empty payload", false},
		{JSON, `{}`, "bucket is empty", false},
		{JSON, `{"bucket":"logins"}`, `bucket "logins" is not of the form "namespace:name"`, false},
		{JSON, `{"bucket":"logins:al-ice"}`, `bucket name "al-ice" contains "-"`, false},
		{JSON, `{"bucket":":alice"}`, "bucket namespace is empty", false},
		{JSON, `{"bucket":"a:b:c"}`, `bucket name "b:c" contains ":"`, false},
		{JSON, `{"bucket":"a:` + strings.Repeat("x", 65) + `"}`, "bucket name is 65 characters long; the limit is 64", false},
		{JSON, `{"bucket":"a:b","tokens":-1}`, "tokens -1 is outside [0, 1000000000000]", false},
		{JSON, `{"bucket":"a:b","tokens":1000000000001}`, "tokens 1000000000001 is outside", false},
		{JSON, `{"bucket":"a:b","tokens":"NaN"}`, "invalid value for int64 field tokens", false},
		{JSON, `{"bucket":"a:b","tokens":1.5}`, "invalid value for int64 field tokens", false},
		{JSON, `{"bucket":"a:b","max_wait":"-1s"}`, "max_wait is negative", false},
		{JSON, `{"bucket":"a:b","max_wait":"745h"}`, "max_wait 2682000s is longer than the limit of 2678400s (744h0m0s)", false},
		{JSON, `{"bucket":"a:b","max_wait":"-500ms"}`, "max_wait is negative", false},
		{JSON, `{"bucket":"a:b","max_wait":"soon"}`, "invalid google.protobuf.Duration", false},
		{JSON, `{"bucket":"a:b","max_wait":"500ms","extra":1}`, "unknown field", false},
		{JSON, `{"bucket":"a:b","max_wait":"2678401s"}`, "max_wait 2678401s is longer than the limit of 2678400s (744h0m0s)", false},
		{JSON, `{"bucket":"a:b","max_wait":"99999999999s"}`, "is longer than the limit", false},
		{JSON, `{"bucket":"a:b","criticality":"URGENT"}`, "invalid value for enum field criticality", false},
		{JSON, `{"bucket":"a:b","criticality":7}`, "criticality 7 is unknown", false},
		{JSON, `{"bucket":"a:b","client_id":"a b"}`, "client_id \"a b\" contains a space", false},
		{JSON, `{"bucket":"a:b","bucket":"a:c"}`, "duplicate field", false},
		{JSON, `{"bucket":"a:b","maxWait":"1s","max_wait":"1s"}`, "duplicate field", false},
		{JSON, `{"bucket":"a:b","extra":1}`, "unknown field", false},
		{JSON, `{"bucket":"a:b"} x`, "cannot decode JSON", false},
		{Protobuf, string(unknown), "unknown field 99", false},
		{Protobuf, string(negPB), "tokens -1 is outside", false},
		{JSON, `{"bucket":"a:b","client_id":"` + strings.Repeat("x", MaxQuotaTakeRequest) + `"}`, "a quota take request is at most 4096 bytes", true},
	} {
		var got QuotaTake
		err := DecodeQuotaTake(c.enc, []byte(c.in), &got)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.80s: error %v, want one containing %q", c.in, err, c.want)
			continue
		}
		if c.tooLarge != errors.Is(err, ErrTooLarge) || c.tooLarge == errors.Is(err, ErrBadRequest) {
			t.Errorf("%.80s: %v: ErrTooLarge %v, ErrBadRequest %v", c.in, err, errors.Is(err, ErrTooLarge), errors.Is(err, ErrBadRequest))
		}
	}
}

// strictTake is the reference: protojson (or proto) and validation, no
// fast path.
func strictTake(e Encoding, data []byte) (QuotaTake, error) {
	var out QuotaTake
	if len(data) > MaxQuotaTakeRequest {
		return out, DecodeQuotaTake(e, data, &out)
	}
	r, err := decodeTakeSlow(e, data)
	if err == nil {
		err = validateTake(&r, &out)
	}
	return out, err
}

// FuzzQuotaTakeFast: the fast decoder accepts only what protojson accepts,
// reads it the same way, and DecodeQuotaTake answers every input exactly
// as the strict decoder does.
func FuzzQuotaTakeFast(f *testing.F) {
	for _, s := range []string{
		`{"bucket":"logins:alice"}`, `{"bucket":"a:b","tokens":0,"max_wait":"0.250s","client_id":"x","criticality":"SHEDDABLE"}`,
		`{"maxWait":"1.s","bucket":"a:b"}`, `{"max_wait":"01s","bucket":"a:b"}`, `{"max_wait":"500ms","bucket":"a:b"}`, `{"max_wait":"1h2m","bucket":"a:b","x":1}`, `{"tokens":007,"bucket":"a:b"}`, `{"tokens":1e2}`,
		`{"bucket":"a:b","tokens":123456789012345}`, `{"bucket":"a:b","max_wait":"1.0000000001s"}`, `{"bucket":"a:b",}`,
		`{"criticality":"CRITICALITY_UNSPECIFIED","bucket":"_:_"}`, ` {}`, `{"bucket":"a:b"}}`, `{"bucket":"\u00e9:b"}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast rawTake
		if decodeTakeFast(data, &fast) {
			ref, err := decodeTakeSlow(JSON, data)
			if err != nil {
				t.Fatalf("fast path accepts what protojson rejects (%v): %q", err, data)
			}
			if fast != ref {
				t.Fatalf("fast path reads %+v, protojson %+v: %q", fast, ref, data)
			}
		}
		var got QuotaTake
		err := DecodeQuotaTake(JSON, data, &got)
		want, wantErr := strictTake(JSON, data)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() || got != want && err == nil {
			t.Fatalf("DecodeQuotaTake = %+v, %v; strict = %+v, %v: %q", got, err, want, wantErr, data)
		}
		if err == nil {
			checkTake(t, &got)
		} else if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("error %v is neither a bad request nor too large", err)
		}
	})
}

// FuzzQuotaTakeProto: the fast protobuf decoder accepts only what
// proto.Unmarshal (with the unknown-field check) accepts and reads it the
// same way; DecodeQuotaTake answers every input as the strict decoder
// does; what is accepted is valid and reads the same from its JSON form.
func FuzzQuotaTakeProto(f *testing.F) {
	b, _ := proto.Marshal(&allotpb.QuotaTakeRequest{Bucket: "a:b", MaxWait: durationpb.New(time.Second), ClientId: "c"})
	f.Add(b)
	f.Add([]byte{0x12, 0x00})
	f.Add([]byte{0x10, 0x05, 0x28, 0x02, 0x1a, 0x04, 0x08, 0x01, 0x10, 0x02})
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast rawTake
		if decodeTakeProtoFast(data, &fast) {
			ref, err := decodeTakeSlow(Protobuf, data)
			if err != nil {
				t.Fatalf("fast path accepts what proto.Unmarshal rejects (%v): %x", err, data)
			}
			if fast != ref {
				t.Fatalf("fast path reads %+v, proto.Unmarshal %+v: %x", fast, ref, data)
			}
		}
		var got QuotaTake
		err := DecodeQuotaTake(Protobuf, data, &got)
		want, wantErr := strictTake(Protobuf, data)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() || got != want && err == nil {
			t.Fatalf("DecodeQuotaTake = %+v, %v; strict = %+v, %v: %x", got, err, want, wantErr, data)
		}
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v is neither a bad request nor too large", err)
			}
			return
		}
		checkTake(t, &got)
		var pb allotpb.QuotaTakeRequest
		if err := proto.Unmarshal(data, &pb); err != nil {
			t.Fatal(err)
		}
		js, err := Marshal(JSON, &pb)
		if err != nil {
			t.Fatal(err)
		}
		var back QuotaTake
		if err := DecodeQuotaTake(JSON, js, &back); err != nil && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("accepted in protobuf, refused in JSON (%v): %s", err, js)
		} else if err == nil && back != got {
			t.Fatalf("protobuf reads %+v, its JSON %+v", got, back)
		}
	})
}

func checkTake(t *testing.T, q *QuotaTake) {
	t.Helper()
	if q.Namespace+":"+q.Name != q.Bucket || ValidateQuotaName("n", q.Namespace) != nil || ValidateQuotaName("n", q.Name) != nil {
		t.Fatalf("accepted bucket %q", q.Bucket)
	}
	r := q.Request
	if r.Tokens < 0 || r.Tokens > MaxQuotaTokens || r.MaxWait < -1 || r.MaxWait > MaxQuotaWait {
		t.Fatalf("accepted request %+v", r)
	}
}

func TestDecodeQuotaReports(t *testing.T) {
	batch, _ := proto.Marshal(&allotpb.QuotaReportBatch{ClientId: "c", Reports: []*allotpb.QuotaReport{{Bucket: "a:b", Tokens: 2}, {Bucket: "bad", Tokens: 1}}})
	for _, c := range []struct {
		enc      Encoding
		in       string
		buckets  string
		client   string
		ignored  int
		errorHas string
	}{
		{JSON, `{"bucket":"a:b","tokens":3}`, "a:b=3", "", 0, ""},
		{JSON, `[{"bucket":"a:b","tokens":3},{"bucket":"a:c","tokens":"4"}]`, "a:b=3 a:c=4", "", 0, ""},
		{JSON, `{"reports":[{"bucket":"a:b","tokens":1}],"client_id":"w1"}`, "a:b=1", "w1", 0, ""},
		{JSON, `[{"bucket":"a:b","tokens":3},{"bucket":"a:b","tokens":-3},{"bucket":"a-b","tokens":1},{"bucket":"a:b","tokns":1},5]`, "a:b=3", "", 4, "report 1: tokens -3 is outside"},
		{JSON, `{"reports":[{"bucket":"a:b","tokens":1},{"bucket":"x"}],"clientId":"w1","extra":true}`, "a:b=1", "w1", 2, "report 1: bucket \"x\" is not of the form"},
		{JSON, `{"reports":[{"bucket":"a:b","tokens":1}],"client_id":"has space"}`, "a:b=1", "", 1, "client_id"},
		{JSON, `{"bucket":"a:b"}`, "", "", 1, "tokens 0 is outside [1,"},
		{JSON, `not json`, "", "", 1, "invalid JSON"},
		{JSON, `[1,`, "", "", 1, "invalid JSON"},
		{JSON, ``, "", "", 1, "empty payload"},
		{JSON, `{"reports":5}`, "", "", 1, "reports: want a list"},
		{Protobuf, string(batch), "a:b=2", "c", 1, "report 1"},
		{Protobuf, "\xff", "", "", 1, "cannot decode protobuf"},
		{JSON, strings.Repeat(" ", MaxJSONRequest+1), "", "", 1, "request too large"},
	} {
		q := DecodeQuotaReports(c.enc, []byte(c.in))
		var got []string
		for _, r := range q.Reports {
			if r.Namespace+":"+r.Name != r.Bucket {
				t.Errorf("%s: report %+v", c.in, r)
			}
			got = append(got, r.Bucket+"="+itoa(r.Tokens))
		}
		if strings.Join(got, " ") != c.buckets || q.ClientID != c.client || q.Ignored != c.ignored || !strings.Contains(q.Error, c.errorHas) {
			t.Errorf("%.60q: got %v client %q ignored %d error %q", c.in, got, q.ClientID, q.Ignored, q.Error)
		}
		resp := q.QuotaReportResponse()
		if int(resp.GetAccepted()) != len(q.Reports) || int(resp.GetIgnored()) != q.Ignored {
			t.Errorf("response %v", resp)
		}
	}
	// The cap on reports per message.
	var b strings.Builder
	b.WriteString("[")
	for i := range MaxQuotaReportsPerBatch + 2 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"bucket":"a:b","tokens":1}`)
	}
	b.WriteString("]")
	if q := DecodeQuotaReports(JSON, []byte(b.String())); len(q.Reports) != MaxQuotaReportsPerBatch || q.Ignored != 2 {
		t.Errorf("over the cap: %d reports, %d ignored", len(q.Reports), q.Ignored)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func FuzzQuotaReports(f *testing.F) {
	for _, s := range []string{`{"bucket":"a:b","tokens":3}`, `[{"bucket":"a:b","tokens":3},{}]`, `{"reports":[{"bucket":"a:b","tokens":1}],"client_id":"x"}`, `{"reports":[1]}`} {
		f.Add(false, []byte(s))
	}
	b, _ := proto.Marshal(&allotpb.QuotaReportBatch{Reports: []*allotpb.QuotaReport{{Bucket: "a:b", Tokens: 2}}})
	f.Add(true, b)
	f.Fuzz(func(t *testing.T, pb bool, data []byte) {
		enc := JSON
		if pb {
			enc = Protobuf
		}
		q := DecodeQuotaReports(enc, data)
		for _, r := range q.Reports {
			if r.Tokens < 1 || r.Tokens > MaxQuotaTokens || r.Namespace+":"+r.Name != r.Bucket || ValidateQuotaName("n", r.Name) != nil || ValidateQuotaName("n", r.Namespace) != nil {
				t.Fatalf("accepted report %+v", r)
			}
		}
		if q.ClientID != "" && ValidateID("c", q.ClientID) != nil || (q.Ignored > 0) != (q.Error != "") || len(q.Reports) > MaxQuotaReportsPerBatch {
			t.Fatalf("result %+v", q)
		}
	})
}

func decisions() []quota.Decision {
	ds := []quota.Decision{
		{Status: quota.OK, Limit: 100, Remaining: 99},
		{Status: quota.OKWait, Wait: 200 * time.Millisecond, Limit: 100, Remaining: -5, Warning: quota.WarningSoftLimit},
		{Status: quota.Rejected, Reason: quota.ReasonTimeout, RetryAfter: 1500*time.Millisecond + time.Nanosecond, Limit: 1},
		{Status: quota.Rejected, Reason: "odd \"reason\"\n\\", RetryAfter: -time.Microsecond, Limit: math.MaxInt64, Remaining: math.MinInt64},
		{},
		{Status: quota.OK, Limit: 10, Shadow: true, ShadowStatus: quota.Rejected, Reason: quota.ReasonTimeout},
		{Status: quota.OK, Limit: 10, Shadow: true, ShadowStatus: quota.OKWait},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ds = append(ds, quota.Decision{Status: quota.Status(rng.IntN(4)), Wait: time.Duration(rng.Int64N(int64(time.Hour))),
			RetryAfter: time.Duration(rng.Int64N(1e6)) * time.Duration([]int64{1, 1e3, 1e6, 1e9}[rng.IntN(4)]), Limit: rng.Int64(), Remaining: rng.Int64() - math.MaxInt64/2,
			Shadow: rng.IntN(3) == 0, ShadowStatus: quota.Status(rng.IntN(4))})
	}
	return ds
}

// TestAppendQuotaTakeResponse: the hand-written encoders write what
// proto.Marshal writes (protobuf) and what protojson reads back as the
// same message (JSON).
func TestAppendQuotaTakeResponse(t *testing.T) {
	for _, d := range decisions() {
		want := QuotaTakeResponseProto(&d, "logins:alice")
		ref, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendQuotaTakeResponse(nil, Protobuf, &d, "logins:alice"); string(got) != string(ref) {
			t.Errorf("%+v: protobuf\n got %x\nwant %x", d, got, ref)
		}
		js := AppendQuotaTakeResponse([]byte("prefix"), JSON, &d, "logins:alice")
		js = js[len("prefix"):]
		if !json.Valid(js) {
			t.Fatalf("invalid JSON: %s", js)
		}
		var back allotpb.QuotaTakeResponse
		if err := protojson.Unmarshal(js, &back); err != nil || !proto.Equal(&back, want) {
			t.Errorf("%+v: JSON %s reads back as %v (%v), want %v", d, js, &back, err, want)
		}
		// Durations are written exactly as protojson writes them.
		for _, dur := range []time.Duration{d.Wait, d.RetryAfter} {
			pj, _ := protojson.Marshal(durationpb.New(dur))
			if got := appendJSONDuration([]byte{'"'}, dur); string(append(got, '"')) != string(pj) {
				t.Errorf("duration %v: got %s, protojson %s", dur, got, pj)
			}
		}
	}
	got := string(AppendQuotaTakeResponse(nil, JSON, &quota.Decision{Status: quota.OKWait, Wait: 200 * time.Millisecond, Limit: 100}, "logins:alice"))
	if want := `{"status":"OK_WAIT","wait":"0.200s","reason":"","limit":100,"remaining":0,"retry_after":"0s","warning":"","matched":"logins:alice","shadow":false,"shadow_status":"STATUS_UNSPECIFIED"}`; got != want {
		t.Errorf("JSON reply\n got %s\nwant %s", got, want)
	}
}

func TestAppendQuotaTakeResponseAllocs(t *testing.T) {
	d := quota.Decision{Status: quota.OKWait, Wait: 200 * time.Millisecond, Limit: 100, Remaining: 3}
	buf := make([]byte, 0, 256)
	for _, e := range []Encoding{JSON, Protobuf} {
		if n := testing.AllocsPerRun(100, func() { buf = AppendQuotaTakeResponse(buf[:0], e, &d, "logins:alice") }); n != 0 {
			t.Errorf("%v: %v allocations per reply", e, n)
		}
	}
}

// strictInto decodes without the fast paths.
func strictInto(e Encoding, data []byte, out *QuotaTake) error {
	r, err := decodeTakeSlow(e, data)
	if err != nil {
		return err
	}
	return validateTake(&r, out)
}

var takeJSON = []byte(`{"bucket":"logins:alice","tokens":1,"max_wait":"0.500s","client_id":"web-7"}`)

func BenchmarkQuotaTake(b *testing.B) {
	pbReq, _ := proto.Marshal(&allotpb.QuotaTakeRequest{Bucket: "logins:alice", Tokens: proto.Int64(1), MaxWait: durationpb.New(500 * time.Millisecond), ClientId: "web-7"})
	d := quota.Decision{Status: quota.OK, Limit: 100, Remaining: 42}
	for _, c := range []struct {
		name string
		enc  Encoding
		in   []byte
		dec  func(Encoding, []byte, *QuotaTake) error
	}{
		{"json-fast", JSON, takeJSON, DecodeQuotaTake},
		{"json-strict", JSON, takeJSON, strictInto},
		{"protobuf-fast", Protobuf, pbReq, DecodeQuotaTake},
		{"protobuf-strict", Protobuf, pbReq, strictInto},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var q QuotaTake
			buf := make([]byte, 0, 256)
			for b.Loop() {
				if err := c.dec(c.enc, c.in, &q); err != nil {
					b.Fatal(err)
				}
				buf = AppendQuotaTakeResponse(buf[:0], c.enc, &d, q.Bucket)
			}
		})
	}
	b.Run("encode-json-protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Marshal(JSON, QuotaTakeResponseProto(&d, "logins:alice")); err != nil {
				b.Fatal(err)
			}
		}
	})
}
