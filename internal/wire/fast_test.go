package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// structResponse builds the message AppendGetCapacityResponse encodes,
// with -0 as +0 (which the encoder writes in its place).
func structResponse(term uint64, entries []LeaseReply) *allotpb.GetCapacityResponse {
	plusZero := func(v float64) float64 {
		if v == 0 {
			return 0
		}
		return v
	}
	resp := &allotpb.GetCapacityResponse{Term: term}
	for _, e := range entries {
		if e.Error != "" {
			resp.Response = append(resp.Response, &allotpb.ResourceResponse{ResourceId: e.ResourceID, Error: e.Error, ErrorCode: e.ErrorCode})
			continue
		}
		resp.Response = append(resp.Response, &allotpb.ResourceResponse{
			ResourceId: e.ResourceID,
			Gets: &allotpb.Lease{
				Capacity:        plusZero(e.Capacity),
				ExpiryTime:      timestamppb.New(time.Unix(0, e.Expiry)),
				RefreshInterval: durationpb.New(e.Refresh),
			},
			SafeCapacity: plusZero(e.SafeCapacity),
			Shadow:       e.Shadow,
		})
		if e.SafeExpiry != 0 {
			resp.Response[len(resp.Response)-1].SafeExpiryTime = timestamppb.New(time.Unix(0, e.SafeExpiry))
		}
	}
	return resp
}

// TestAppendGetCapacityResponse checks the hand encoder against
// proto.Marshal byte for byte (deterministic marshaling), including zero
// values that proto3 omits.
func TestAppendGetCapacityResponse(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 2000 {
		term, entries := randomReply(rng, []string{"", "db", "mysql/main", string(make([]byte, 200))})
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(structResponse(term, entries))
		if err != nil {
			t.Fatal(err)
		}
		got := AppendGetCapacityResponse(nil, term, entries)
		if !bytes.Equal(got, want) {
			t.Fatalf("iter %d: encodings differ\n got %x\nwant %x", iter, got, want)
		}
	}
}

// randomReply draws a term and up to four entries of a GetCapacity
// reply, with resource ids from ids, zero and -0 amounts, edge times and
// some errors.
func randomReply(rng *rand.Rand, ids []string) (uint64, []LeaseReply) {
	pick := func(vals ...float64) float64 { return vals[rng.IntN(len(vals))] }
	var entries []LeaseReply
	for range rng.IntN(5) {
		entries = append(entries, LeaseReply{
			ResourceID:   ids[rng.IntN(len(ids))],
			Capacity:     pick(0, math.Copysign(0, -1), 1, 33.5, rng.Float64()*1e12, 1e15, 1e-7, 5e-324),
			Expiry:       []int64{0, 1, int64(time.Second), time.Now().UnixNano(), 1e18 + 999, 1e18 + 1e6, 1e18 + 1e3}[rng.IntN(7)],
			Refresh:      []time.Duration{0, time.Nanosecond, 50 * time.Millisecond, 5 * time.Second, time.Hour + 1}[rng.IntN(5)],
			SafeCapacity: pick(0, math.Copysign(0, -1), -1, 7, math.MaxFloat64),
			SafeExpiry:   []int64{0, 1, int64(time.Second), time.Now().UnixNano(), 1e18 + 999}[rng.IntN(5)],
			Shadow:       rng.IntN(3) == 0,
		})
		if rng.IntN(4) == 0 {
			entries[len(entries)-1].Error = []string{"resource matches no template", `quoted "id" \ and` + "\n\t\x01\u2028é"}[rng.IntN(2)]
			entries[len(entries)-1].ErrorCode = []int32{0, 404, 429, -1}[rng.IntN(4)]
		}
	}
	return []uint64{0, 1, 1 << 40, math.MaxUint64}[rng.IntN(4)], entries
}

// TestAppendGetCapacityResponseJSON checks the hand JSON encoder against
// Marshal: the same bytes once both are compacted (protojson varies its
// whitespace on purpose).
func TestAppendGetCapacityResponseJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	compact := func(b []byte) []byte {
		var out bytes.Buffer
		if err := json.Compact(&out, b); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		return out.Bytes()
	}
	for iter := range 2000 {
		term, entries := randomReply(rng, []string{"", "db", "mysql/main", "a\"b\\c\u007f\u0085日本"})
		want, err := Marshal(JSON, structResponse(term, entries))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := AppendGetCapacityResponseJSON(nil, term, entries)
		if !ok {
			t.Fatalf("iter %d: not encoded", iter)
		}
		if w, g := compact(want), compact(got); !bytes.Equal(w, g) {
			t.Fatalf("iter %d: encodings differ\n got %s\nwant %s", iter, g, w)
		}
		CheckJSONReply(t, got)
	}
	bad := []LeaseReply{{ResourceID: "a\xff"}}
	if _, err := Marshal(JSON, structResponse(1, bad)); err == nil {
		t.Fatal("protojson wrote invalid UTF-8")
	}
	if _, ok := AppendGetCapacityResponseJSON(nil, 1, bad); ok {
		t.Fatal("invalid UTF-8 encoded")
	}
}

// FuzzAppendGetCapacityResponseJSON checks the hand JSON encoder against
// Marshal for any resource id and error text: the same bytes once both
// are compacted, or both refusing (invalid UTF-8).
func FuzzAppendGetCapacityResponseJSON(f *testing.F) {
	for _, id := range []string{"mysql/main", "", "a\"b\\c", `say "hi"`, `back\slash`, "nl\n", "\x7f\u0085日本", "a\xff", "tab\there", "\u2028"} {
		f.Add(id, "")
		f.Add("db", id)
	}
	f.Fuzz(func(t *testing.T, id, errText string) {
		entries := []LeaseReply{
			{ResourceID: id, Capacity: 33.5, Expiry: 1_795_000_000_517_000_000, Refresh: 5 * time.Second, SafeCapacity: 7},
			{ResourceID: id, Error: errText, ErrorCode: 404},
		}
		want, err := Marshal(JSON, structResponse(9, entries))
		got, ok := AppendGetCapacityResponseJSON(nil, 9, entries)
		if ok != (err == nil) {
			t.Fatalf("id %q, error %q: encoded %v, Marshal's error %v", id, errText, ok, err)
		}
		if !ok {
			return
		}
		var w, g bytes.Buffer
		if err := json.Compact(&w, want); err != nil {
			t.Fatal(err)
		}
		if err := json.Compact(&g, got); err != nil {
			t.Fatalf("%v: %s", err, got)
		}
		if !bytes.Equal(w.Bytes(), g.Bytes()) {
			t.Fatalf("encodings differ\n got %s\nwant %s", g.Bytes(), w.Bytes())
		}
	})
}

func BenchmarkEncodeGetCapacityResponse(b *testing.B) {
	entries := []LeaseReply{{ResourceID: "mysql/main", Capacity: 33.5, Expiry: time.Now().UnixNano(), Refresh: 5 * time.Second, SafeCapacity: 10}}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = AppendGetCapacityResponse(buf[:0], 7, entries)
		}
	})
	b.Run("proto.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(structResponse(7, entries)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = AppendGetCapacityResponseJSON(buf[:0], 7, entries)
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Marshal(JSON, structResponse(7, entries)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestJSONTimestampAndDouble checks the JSON encoder's own date and
// integer paths against protojson over random times (leap days and
// century years among them) and over integers up to 2^53 and past.
func TestJSONTimestampAndDouble(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	times := []int64{-1, math.MinInt64, 0, 1, 86399e9 + 999999999, 86400e9, 951782400e9, 951868800e9, 4107542400e9, math.MaxInt64}
	for range 20000 {
		times = append(times, rng.Int64N(math.MaxInt64), rng.Int64N(math.MaxInt64/int64(time.Second))*1e9+[]int64{0, 1000, 1e6, rng.Int64N(1e9)}[rng.IntN(4)])
	}
	for _, ns := range times {
		want, err := Marshal(JSON, timestamppb.New(time.Unix(0, ns)))
		if err != nil {
			t.Fatal(err)
		}
		if got := `"` + string(appendJSONTimestamp(nil, ns)) + `"`; got != string(want) {
			t.Fatalf("timestamp %d: got %s, want %s", ns, got, want)
		}
	}
	doubles := []float64{1, -1, 1 << 53, 1<<53 - 1, -(1 << 53), 1 << 54, 1e20, 1e21, 123456789, 0.5, -0.5, 1e6}
	for range 20000 {
		doubles = append(doubles, float64(rng.Int64N(1<<54)-1<<53), math.Trunc(rng.Float64()*1e22))
	}
	for _, v := range doubles {
		want, err := Marshal(JSON, &allotpb.Lease{Capacity: v})
		if err != nil {
			t.Fatal(err)
		}
		if got := `{"capacity":` + string(appendJSONDouble(nil, v)) + `}`; got != string(bytes.ReplaceAll(want, []byte(" "), nil)) {
			t.Fatalf("double %v: got %s, want %s", v, got, want)
		}
	}
}

// TestFieldsFitOneByteTags checks that every field the hand encoders
// write is below 16, so that appendTag's one byte is its whole tag, as
// protowire.AppendTag writes it.
func TestFieldsFitOneByteTags(t *testing.T) {
	for _, num := range []protowire.Number{fieldResponse, fieldTerm, fieldResourceID, fieldGets, fieldSafeCapacity, fieldError,
		fieldErrorCode, fieldShadow, fieldSafeExpiry, fieldCapacity, fieldExpiry, fieldRefresh, fieldSeconds, fieldNanos,
		fieldTakeStatus, fieldTakeWait, fieldTakeReason, fieldTakeLimit, fieldTakeRemaining, fieldTakeRetryAfter,
		fieldTakeWarning, fieldTakeMatched, fieldTakeShadow, fieldTakeShadowStat} {
		for _, typ := range []protowire.Type{protowire.VarintType, protowire.Fixed64Type, protowire.BytesType} {
			if got, want := appendTag(nil, num, typ), protowire.AppendTag(nil, num, typ); !bytes.Equal(got, want) {
				t.Errorf("field %d type %d: tag %x, want %x", num, typ, got, want)
			}
		}
	}
}
