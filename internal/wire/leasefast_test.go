package wire

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// usedGet is a request object as a pool hands it back: full of an
// earlier request, with two resources, leases and floors to reuse.
func usedGet() *allotpb.GetCapacityRequest {
	r := agentRequest()
	r.Resource[0].Safe = &allotpb.Lease{Capacity: 2, ExpiryTime: timestamppb.New(time.Unix(1_795_000_100, 0))}
	r.Resource = append(r.Resource, &allotpb.ResourceRequest{ResourceId: "other", Wants: 1, Priority: -3,
		Has: &allotpb.Lease{Capacity: 4}})
	return r
}

func usedRelease() *allotpb.ReleaseCapacityRequest {
	return &allotpb.ReleaseCapacityRequest{ClientId: "old", ResourceId: []string{"a", "b", "c"}}
}

// reference decodes data as DecodeGetCapacity and DecodeRelease must:
// Unmarshal into a fresh message m, then validate.
func reference[M proto.Message](e Encoding, data []byte, m M, validate func(M) error) (M, error) {
	err := Unmarshal(e, data, m)
	if err == nil {
		err = validate(m)
	}
	return m, err
}

// sameDecode fails t unless got/gotErr is exactly want/wantErr: the same
// error text and classes, or messages equal down to the bits of every
// double (proto.Equal takes -0 for +0).
func sameDecode(t *testing.T, what string, data []byte, want, got proto.Message, wantErr, gotErr error) {
	t.Helper()
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%s %q: reference error %v, fast error %v", what, data, wantErr, gotErr)
	}
	if wantErr != nil {
		if wantErr.Error() != gotErr.Error() || errors.Is(wantErr, ErrBadRequest) != errors.Is(gotErr, ErrBadRequest) ||
			errors.Is(wantErr, ErrTooLarge) != errors.Is(gotErr, ErrTooLarge) {
			t.Fatalf("%s %q: reference error %v, fast error %v", what, data, wantErr, gotErr)
		}
		return
	}
	if !proto.Equal(want, got) {
		t.Fatalf("%s %q: reference %v, fast %v", what, data, want, got)
	}
	det := proto.MarshalOptions{Deterministic: true}
	wb, err1 := det.Marshal(want)
	gb, err2 := det.Marshal(got)
	if err1 != nil || err2 != nil || !bytes.Equal(wb, gb) {
		t.Fatalf("%s %q: reference encodes as %x (%v), fast as %x (%v)", what, data, wb, err1, gb, err2)
	}
}

// checkLeaseDecoders decodes data both ways, as a GetCapacity and as a
// ReleaseCapacity request, into reused objects, and compares.
func checkLeaseDecoders(t *testing.T, e Encoding, data []byte) {
	t.Helper()
	want, wantErr := reference(e, data, &allotpb.GetCapacityRequest{}, ValidateGetCapacity)
	wantRel, wantRelErr := reference(e, data, &allotpb.ReleaseCapacityRequest{}, ValidateRelease)
	// Without names, and with a cache that has seen the ids (and others
	// of the same hash slot, with a one-slot cache) before.
	for _, ids := range []Names{nil, testIDs.Name, oneSlot().Name} {
		got := usedGet()
		gotErr := DecodeGetCapacityNames(e, data, got, ids)
		sameDecode(t, "GetCapacity "+e.String(), data, want, got, wantErr, gotErr)

		gotRel := usedRelease()
		gotErr = DecodeReleaseNames(e, data, gotRel, ids)
		sameDecode(t, "ReleaseCapacity "+e.String(), data, wantRel, gotRel, wantRelErr, gotErr)
	}
	got := usedGet()
	gotErr := DecodeGetCapacity(e, data, got)
	sameDecode(t, "GetCapacity "+e.String(), data, want, got, wantErr, gotErr)
	gotRel := usedRelease()
	gotErr = DecodeRelease(e, data, gotRel)
	sameDecode(t, "ReleaseCapacity "+e.String(), data, wantRel, gotRel, wantRelErr, gotErr)
}

// testIDs is one cache for all the checks: it keeps the ids of earlier
// inputs, as a server's does.
var testIDs = NewIDCache()

// oneSlot returns a cache whose every id falls in one slot: each lookup
// of an id other than the last one stored is a collision.
func oneSlot() *IDCache {
	c := NewIDCache()
	for i := range c.slots {
		c.slots[i].Store(new("a"))
	}
	return c
}

func marshalled(t testing.TB, m proto.Message) []byte {
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// appendField appends a raw field: tag and value bytes.
func appendField(b []byte, num protowire.Number, typ protowire.Type, v []byte) []byte {
	return append(protowire.AppendTag(b, num, typ), v...)
}

// leaseSeeds are binary requests at the edges of what the fast decoder
// takes: unknown fields, repeats, wrong wire types, packed scalars,
// out-of-range numbers, invalid UTF-8.
func leaseSeeds(t testing.TB) [][]byte {
	agent := marshalled(t, agentRequest())
	used := marshalled(t, usedGet())
	varint := func(v uint64) []byte { return protowire.AppendVarint(nil, v) }
	bytesOf := func(b []byte) []byte { return protowire.AppendBytes(nil, b) }
	fixed := func(f float64) []byte { return protowire.AppendFixed64(nil, math.Float64bits(f)) }
	resource := func(fields ...[]byte) []byte {
		return appendField(nil, fieldGetResource, protowire.BytesType, bytesOf(bytes.Join(fields, nil)))
	}
	client := appendField(nil, fieldGetClientID, protowire.BytesType, bytesOf([]byte("c")))
	rid := appendField(nil, fieldResResourceID, protowire.BytesType, bytesOf([]byte("r")))
	ts := func(sec, nsec uint64) []byte {
		return bytesOf(appendField(appendField(nil, fieldSeconds, protowire.VarintType, varint(sec)), fieldNanos, protowire.VarintType, varint(nsec)))
	}
	lease := func(fields ...[]byte) []byte { return bytesOf(bytes.Join(fields, nil)) }
	return [][]byte{
		nil,
		agent,
		used,
		marshalled(t, withUnknown(agentRequest())),
		marshalled(t, func() proto.Message { r := agentRequest(); withUnknown(r.Resource[0]); return r }()),
		marshalled(t, func() proto.Message { r := agentRequest(); withUnknown(r.Resource[0].Has.ExpiryTime); return r }()),
		marshalled(t, &allotpb.ReleaseCapacityRequest{ClientId: "c", ResourceId: []string{"a", "b"}}),
		marshalled(t, withUnknown(&allotpb.ReleaseCapacityRequest{ClientId: "c", ResourceId: []string{"a"}})),
		append(append([]byte{}, agent...), agent...),               // every field twice: last client_id, two resources
		append(append([]byte{}, client...), resource(rid, rid)...), // resource_id twice: the last counts
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResHas, protowire.BytesType, lease()), appendField(nil, fieldResHas, protowire.BytesType, lease(appendField(nil, fieldCapacity, protowire.Fixed64Type, fixed(3)))))...), // has twice: merged
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResPriority, protowire.BytesType, bytesOf(varint(1))))...),                                                                                                              // packed priority: unknown
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResPriority, protowire.VarintType, varint(1<<40)))...),                                                                                                                  // priority out of int32
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResPriority, protowire.VarintType, varint(math.MaxUint64)))...),                                                                                                         // -1
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResWants, protowire.Fixed64Type, fixed(math.NaN())))...),
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResWants, protowire.Fixed64Type, fixed(math.Copysign(0, -1))))...),
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResWants, protowire.Fixed32Type, []byte{0, 0, 0, 0}))...),                                                   // wrong wire type
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResHas, protowire.BytesType, lease(appendField(nil, fieldExpiry, protowire.BytesType, ts(1e9, 1e9)))))...),  // nanos out of range
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResSafe, protowire.BytesType, lease(appendField(nil, fieldExpiry, protowire.BytesType, ts(1<<63, 5)))))...), // negative seconds
		append(append([]byte{}, client...), resource(rid, appendField(nil, fieldResHas, protowire.BytesType, lease(appendField(nil, fieldRefresh, protowire.BytesType, ts(2, 1<<33)))))...), // nanos truncated
		append(appendField(nil, fieldGetClientID, protowire.BytesType, bytesOf([]byte{'c', 0xff})), resource(rid)...),                                                                       // invalid UTF-8
		append(appendField(nil, fieldGetClientID, protowire.BytesType, bytesOf([]byte("ü"))), resource(rid)...),                                                                             // valid UTF-8, not ASCII
		append(append([]byte{}, client...), appendField(nil, fieldRelResourceID, protowire.BytesType, bytesOf([]byte{0xc3}))...),                                                            // invalid UTF-8 in a release
		appendField(nil, 0, protowire.VarintType, varint(1)), // field number 0
		agent[:len(agent)-1], // truncated
	}
}

// releaseJSONSeeds are JSON ReleaseCapacity requests: the first five of
// the plain shape, the others edges.
var releaseJSONSeeds = []string{
	`{"client_id":"me","resource_id":["a","mysql/main"]}`,
	` { "clientId" : "me" , "resourceId" : [ "a" , "b" ] } `,
	`{"client_id":"me","resource_id":[]}`,
	`{"resource_id":["a"]}`,
	`{}`,
	`{"client_id":"me","resource_id":null}`,
	`{"client_id":"me","resource_id":["a",]}`,
	`{"client_id":"me","resource_id":["a"],"resourceId":["b"]}`,
	`{"client_id":"me","client_id":"me","resource_id":["a"]}`,
	`{"client_id":"me","resource_id":"a"}`,
	`{"client_id":"me","resource_id":["a","a"]}`,
	`{"client_id":"me","resource_id":["a b"]}`,
	`{"client_id":"me","resource_id":[1]}`,
	`{"client_id":"me","resource_id":["\u0061"]}`,
	`{"client_id":"me","resource_id":["é"]}`,
	`{"client_id":"me","resource_id":["a"]} x`,
	`{"client_id":"me","resource_id":[["a"]]}`,
	`{"client_id":"","resource_id":["a"]}`,
}

var leaseJSONSeeds = []string{
	`{"client_id":"me","resource":[{"resource_id":"db","wants":10}]}`,
	` { "clientId" : "me" , "resource" : [ { "resourceId" : "db" , "wants" : 10.25 , "priority" : -3 } , {"resource_id":"x","priority":0} ] } `,
	`{"client_id":"me","resource":[]}`,
	`{"client_id":"me","resource":[{}]}`,
	jsonRefresh,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{},"safe":{"capacity":0}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiryTime":"2024-02-29T23:59:59.999999999Z","refreshInterval":"0.000000001s"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"0001-01-01T00:00:00Z"},"safe":{"expiry_time":"9999-12-31T23:59:59.9Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"capacity":5,"refresh_interval":"99999999999.5s"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-02-29T00:00:00Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-04-31T00:00:00Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-01-01T00:00:60Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-01-01T24:00:00Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"0000-01-01T00:00:00Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-01-01T00:00:00.Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-01-01T00:00:00.1234567891Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-01-01T00:00:00+01:00"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-01-01t00:00:00z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-1-01T00:00:00Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"+026-01-01T00:00:00Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"refresh_interval":"500ms"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"refresh_interval":"-1s"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"refresh_interval":"05s"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"refresh_interval":"1.s"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"refresh_interval":".5s"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"refresh_interval":"999999999999s"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"capacity":1,"capacity":2}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"expiry_time":"2026-01-01T00:00:00Z","expiryTime":"2026-01-01T00:00:00Z"}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"capacity":1},"has":{"capacity":1}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":null}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"capacity":-1}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"gets":1}}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":[]}]}`,
	`{}`,
	`{"client_id":"me","clientId":"me","resource":[{"resource_id":"db"}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","resource_id":"db"}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","wants":1e3}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","wants":01}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","wants":"10"}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","wants":-0}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","wants":1.}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","priority":-0}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","priority":1001}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","priority":9999999999}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","wants":1000000000000001}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db","has":{"capacity":1,"expiry_time":"2026-01-01T00:00:00Z","refresh_interval":"5s"}}]}`,
	`{"client_id":null,"resource":[{"resource_id":"db"}]}`,
	`{"client_id":"m\u00e9","resource":[{"resource_id":"db"}]}`,
	`{"client_id":"me","resource":[{"resource_id":"db"}]}x`,
	`{"client_id":"me","resource":[{"resource_id":"db"},]}`,
	`{"client_id":"me","resource":[{"resource_id":"db"}],}`,
	`{"client_id":"me","resource_id":["a","b"]}`,
	`{"client_id":"me","resource":[{"resource_id":"a"},{"resource_id":"a"}]}`,
	`{"client_id":"a b","resource":[{"resource_id":"db"}]}`,
	``,
}

// TestLeaseDecodersTakeTheFastPath checks that the common requests are
// decoded by hand (the point of the fast decoders) and as Unmarshal
// decodes them.
func TestLeaseDecodersTakeTheFastPath(t *testing.T) {
	for _, m := range []proto.Message{agentRequest(), usedGet(),
		&allotpb.GetCapacityRequest{ClientId: "c", Resource: []*allotpb.ResourceRequest{{ResourceId: "r"}}}} {
		data := marshalled(t, m)
		if !decodeGetProtoFast(data, usedGet(), nil) {
			t.Errorf("%v: not on the fast path", m)
		}
		checkLeaseDecoders(t, Protobuf, data)
	}
	rel := marshalled(t, &allotpb.ReleaseCapacityRequest{ClientId: "c", ResourceId: []string{"a", "b"}})
	if !decodeReleaseProtoFast(rel, usedRelease(), nil) {
		t.Error("release not on the fast path")
	}
	checkLeaseDecoders(t, Protobuf, rel)
	for _, s := range leaseJSONSeeds[:9] {
		if !decodeGetJSONFast([]byte(s), usedGet(), nil) {
			t.Errorf("%s: not on the fast path", s)
		}
	}
	for _, s := range releaseJSONSeeds[:5] {
		if !decodeReleaseJSONFast([]byte(s), usedRelease(), nil) {
			t.Errorf("release %s: not on the fast path", s)
		}
		checkLeaseDecoders(t, JSON, []byte(s))
	}
}

// jsonRefresh is a JSON client's refresh: it sends back the lease and
// the floor it was answered, in the form the coordinator writes them.
const jsonRefresh = `{"client_id":"host-1:4242:9f86d081","resource":[{"resource_id":"mysql/main","wants":33.5,"priority":1,` +
	`"has":{"capacity":30,"expiry_time":"2026-11-28T08:00:00.517Z","refresh_interval":"5s"},` +
	`"safe":{"capacity":2,"expiry_time":"2026-11-28T08:10:00Z"}}]}`

// TestLeaseDecodersEdges runs the differential check on the seeds.
func TestLeaseDecodersEdges(t *testing.T) {
	for _, data := range leaseSeeds(t) {
		checkLeaseDecoders(t, Protobuf, data)
	}
	for _, s := range append(leaseJSONSeeds, releaseJSONSeeds...) {
		checkLeaseDecoders(t, JSON, []byte(s))
	}
}

// TestLeaseDecodersAllocate checks that decoding a common request into a
// reused object allocates only its two strings.
func TestLeaseDecodersAllocate(t *testing.T) {
	for _, c := range []struct {
		enc  Encoding
		data []byte
	}{
		{Protobuf, marshalled(t, agentRequest())},
		{JSON, []byte(leaseJSONSeeds[0])},
		{JSON, []byte(jsonRefresh)},
	} {
		r := usedGet()
		allocs := testing.AllocsPerRun(100, func() {
			if err := DecodeGetCapacity(c.enc, c.data, r); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 2 {
			t.Errorf("%v: %.0f allocations per request; want at most 2 (client_id, resource_id)", c.enc, allocs)
		}
		ids := NewIDCache()
		allocs = testing.AllocsPerRun(100, func() {
			if err := DecodeGetCapacityNames(c.enc, c.data, r, ids.Name); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 {
			t.Errorf("%v with an id cache: %.0f allocations per request; want at most 1 (client_id)", c.enc, allocs)
		}
	}
	// A release reuses its list of ids; with the cache, only its client
	// id is a new string.
	for _, enc := range []Encoding{Protobuf, JSON} {
		data, err := Marshal(enc, &allotpb.ReleaseCapacityRequest{ClientId: "host-1:4242", ResourceId: []string{"mysql/main", "db"}})
		if err != nil {
			t.Fatal(err)
		}
		r, ids := usedRelease(), NewIDCache()
		allocs := testing.AllocsPerRun(100, func() {
			if err := DecodeReleaseNames(enc, data, r, ids.Name); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 {
			t.Errorf("release in %v: %.0f allocations per request; want at most 1 (client_id)", enc, allocs)
		}
	}
}

// FuzzDecodeLease compares DecodeGetCapacity and DecodeRelease, decoding
// into objects full of an earlier request, with Unmarshal and validation
// into fresh ones, on arbitrary bytes in both encodings.
func FuzzDecodeLease(f *testing.F) {
	for _, data := range leaseSeeds(f) {
		f.Add(data, true)
	}
	for _, s := range append(leaseJSONSeeds, releaseJSONSeeds...) {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, binary bool) {
		enc := JSON
		if binary {
			enc = Protobuf
		}
		checkLeaseDecoders(t, enc, data)
	})
}
