package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/allot/allot/proto/allotpb"
)

// reflectUnknown reports whether m or any message it holds has unknown
// fields, by reflection: the reference the typed walks of strict.go are
// checked against.
func reflectUnknown(m protoreflect.Message) bool {
	found := len(m.GetUnknown()) > 0
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case found:
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				found = fd.MapValue().Message() != nil && reflectUnknown(mv.Message())
				return !found
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len() && !found; i++ {
				found = reflectUnknown(v.List().Get(i).Message())
			}
		case fd.Message() != nil:
			found = reflectUnknown(v.Message())
		}
		return !found
	})
	return found
}

// saneLease checks what validation promises of a lease.
func saneLease(t *testing.T, l *allotpb.Lease) {
	t.Helper()
	if l == nil {
		return
	}
	saneAmount(t, "has.capacity", l.GetCapacity())
	if e := l.GetExpiryTime(); e != nil && (e.CheckValid() != nil || e.AsTime().Before(time.Unix(0, 0)) || e.AsTime().UnixNano() < 0) {
		t.Fatalf("validated expiry_time %v", e)
	}
	if d := l.GetRefreshInterval(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0 || d.AsDuration() > MaxLeaseLength) {
		t.Fatalf("validated refresh_interval %v", d)
	}
}

func saneAmount(t *testing.T, what string, v float64) {
	t.Helper()
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxWants || math.Signbit(v) {
		t.Fatalf("validated %s %g (sign bit %v)", what, v, math.Signbit(v))
	}
}

// roundTrip re-encodes a validated request in both encodings and checks
// that each decodes and validates again: the two encodings accept the
// same requests.
func roundTrip(t *testing.T, m proto.Message, validate func(proto.Message) error) {
	t.Helper()
	for _, enc := range []Encoding{Protobuf, JSON} {
		data, err := Marshal(enc, m)
		if err != nil {
			t.Fatalf("validated request does not encode in %v: %v", enc, err)
		}
		if CheckSize(enc, len(data)) != nil {
			continue // fits one encoding's limit, not the other's
		}
		back := m.ProtoReflect().New().Interface()
		if err := Unmarshal(enc, data, back); err != nil {
			t.Fatalf("validated request re-encoded in %v does not decode: %v\n%v", enc, err, m)
		}
		if err := validate(back); err != nil {
			t.Fatalf("validated request re-encoded in %v does not validate: %v\n%v", enc, err, m)
		}
	}
}

// CheckJSONReply fails t if a JSON reply does not parse or carries null
// or -0, checking token by token. It is exported for the external tests
// of this package (coordinator_test.go).
func CheckJSONReply(t testing.TB, data []byte) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("JSON reply does not parse: %v: %s", err, data)
		}
		switch v := tok.(type) {
		case nil:
			t.Fatalf("JSON reply carries null: %s", data)
		case json.Number:
			if f, err := v.Float64(); err == nil && math.Signbit(f) && f == 0 {
				t.Fatalf("JSON reply carries -0: %s", data)
			}
		}
	}
}

// FuzzDecode feeds arbitrary bytes to every request decoder in both
// encodings. Nothing may panic; oversized requests and binary requests
// with unknown fields are refused; whatever validates is within every
// documented limit, has no -0, and survives re-encoding in both
// encodings. The same bytes, read as a (lenient) binary reply, must
// re-encode as JSON without null or -0.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"client_id":"me","resource":[{"resource_id":"db","wants":10}]}`), false)
	f.Add([]byte(`{"clientId":"me","resource":[{"resourceId":"db","wants":"NaN","has":{"capacity":1,"expiry_time":"2026-01-01T00:00:00Z"}}]}`), false)
	f.Add([]byte(`{"client_id":"me","resource":[{"resource_id":"db","wants":-0,"has":{"capacity":-0,"refresh_interval":"-5s"}}]}`), false)
	f.Add([]byte(`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"1969-12-31T23:59:59Z","refresh_interval":"86400.000000001s"}}]}`), false)
	f.Add([]byte(`{"client_id":"me","resource_id":["a","b"]}`), false)
	f.Add([]byte(`{"server_id":"s","resource":[{"resource_id":"db","outstanding":-0,"wants":[{"priority":1,"num_clients":3,"wants":5}]}]}`), false)
	f.Add([]byte{0x0a, 0x02, 'm', 'e', 0x12, 0x05, 0x0a, 0x01, 'r', 0x21, 0, 0, 0, 0, 0, 0, 0xf0, 0x7f}, true)
	for _, m := range []proto.Message{
		agentRequest(),
		withUnknown(agentRequest()),
		func() proto.Message { r := agentRequest(); withUnknown(r.Resource[0].Has.RefreshInterval); return r }(),
		func() proto.Message { r := agentRequest(); r.Resource[0].Wants = math.Copysign(0, -1); return r }(),
		func() proto.Message { r := agentRequest(); r.Resource[0].Has.RefreshInterval.Seconds = -5; return r }(),
		&allotpb.GetServerCapacityRequest{ServerId: "s", Resource: []*allotpb.ServerCapacityResourceRequest{{ResourceId: "r", Wants: []*allotpb.PriorityBandAggregate{withUnknown(&allotpb.PriorityBandAggregate{NumClients: 1})}}}},
		partialReply(),
	} {
		data, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, true)
	}
	f.Add(protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 7), true)
	f.Fuzz(func(t *testing.T, data []byte, binary bool) {
		enc := JSON
		if binary {
			enc = Protobuf
		}
		oversized := CheckSize(enc, len(data)) != nil
		decode := func(m proto.Message) bool {
			err := Unmarshal(enc, data, m)
			if oversized != errors.Is(err, ErrTooLarge) {
				t.Fatalf("%d bytes of %v: Unmarshal = %v", len(data), enc, err)
			}
			if enc == Protobuf && !oversized {
				raw := m.ProtoReflect().New().Interface()
				rawOK := proto.Unmarshal(data, raw) == nil && !reflectUnknown(raw.ProtoReflect())
				if rawOK != (err == nil) {
					t.Fatalf("Unmarshal %T = %v, but decoding with a reflective unknown-field check says ok = %v", m, err, rawOK)
				}
			}
			return err == nil
		}

		var g allotpb.GetCapacityRequest
		if decode(&g) && ValidateGetCapacity(&g) == nil {
			if len(g.GetResource()) > MaxResourcesPerReq {
				t.Fatal("validated too many resources")
			}
			for _, r := range g.GetResource() {
				if r.GetResourceId() == "" || r.GetPriority() < MinPriority || r.GetPriority() > MaxPriority {
					t.Fatalf("validated a bad request: %v", &g)
				}
				saneAmount(t, "wants", r.GetWants())
				saneLease(t, r.GetHas())
			}
			roundTrip(t, &g, func(m proto.Message) error { return ValidateGetCapacity(m.(*allotpb.GetCapacityRequest)) })
		}
		var rel allotpb.ReleaseCapacityRequest
		if decode(&rel) && ValidateRelease(&rel) == nil {
			roundTrip(t, &rel, func(m proto.Message) error { return ValidateRelease(m.(*allotpb.ReleaseCapacityRequest)) })
		}
		var s allotpb.GetServerCapacityRequest
		if decode(&s) && ValidateGetServerCapacity(&s) == nil {
			bands := 0
			for _, r := range s.GetResource() {
				saneAmount(t, "outstanding", r.GetOutstanding())
				saneLease(t, r.GetHas())
				for _, b := range r.GetWants() {
					bands++
					if b.GetNumClients() < 1 || b.GetNumClients() > maxSubclientsPerBand {
						t.Fatalf("validated a bad band: %v", b)
					}
					saneAmount(t, "band wants", b.GetWants())
				}
			}
			if bands > MaxBandsPerReq {
				t.Fatalf("validated %d bands", bands)
			}
			roundTrip(t, &s, func(m proto.Message) error { return ValidateGetServerCapacity(m.(*allotpb.GetServerCapacityRequest)) })
		}

		var resp allotpb.GetCapacityResponse
		if proto.Unmarshal(data, &resp) == nil {
			out, err := Marshal(JSON, &resp)
			if err == nil {
				CheckJSONReply(t, out)
			}
		}
	})
}
