package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// randomRecord draws a lease record with every field set or not, ids from
// ids, and doubles and times from the values that stress an encoder.
func randomRecord(rng *rand.Rand, ids []string) *allotpb.LeaseHorizon {
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	doubles := []float64{0, 1, 0.5, 100, 1e-7, 1e21, 123456.789, -3, math.Inf(1), math.Inf(-1), math.NaN(),
		math.MaxFloat64, math.SmallestNonzeroFloat64, 1 << 53, 1<<53 + 2, 1e20, 0.1 + 0.2}
	double := func() float64 { return doubles[rng.IntN(len(doubles))] }
	ts := func() *timestamppb.Timestamp {
		switch rng.IntN(6) {
		case 0:
			return nil
		case 1:
			return &timestamppb.Timestamp{}
		case 2:
			return &timestamppb.Timestamp{Seconds: -1 - rng.Int64N(1e9), Nanos: rng.Int32N(1e9)}
		}
		nanos := []int32{0, 1, 1e6, 123e6, 123456e3, 999999999}[rng.IntN(6)]
		return &timestamppb.Timestamp{Seconds: 1.7e9 + rng.Int64N(1e9), Nanos: nanos}
	}
	h := &allotpb.LeaseHorizon{Horizon: ts(), Complete: rng.IntN(2) == 0}
	if rng.IntN(4) > 0 {
		h.Node, h.ServerId = pick(ids), pick(ids)
	}
	if rng.IntN(4) > 0 {
		h.Term = []uint64{1, 1 << 40, math.MaxUint64}[rng.IntN(3)]
	}
	if rng.IntN(2) == 0 {
		h.Partitions = uint32(rng.IntN(3)) * 7
	}
	if rng.IntN(2) == 0 {
		h.HoldersKey = make([]byte, rng.IntN(33))
		for i := range h.HoldersKey {
			h.HoldersKey[i] = byte(rng.Uint32())
		}
	}
	if n := rng.IntN(5); n > 0 {
		h.Resources = map[string]*allotpb.ResourceSummary{}
		for range n {
			s := &allotpb.ResourceSummary{LatestExpiry: ts(), HoldersUntil: ts(), FloorExpiry: ts()}
			if rng.IntN(3) > 0 {
				s.Ceiling = double()
			}
			if rng.IntN(3) > 0 {
				s.FloorCeiling = double()
			}
			if rng.IntN(2) == 0 {
				s.Holders = rng.Uint32N(5) * 1000
				s.HoldersDigest = []uint64{0, 1, math.MaxUint64, rng.Uint64()}[rng.IntN(4)]
			}
			for range rng.IntN(4) {
				s.HolderIds = append(s.HolderIds, pick(ids))
			}
			if rng.IntN(2) == 0 {
				s.UnlistedFloors = proto.Float64(double())
			}
			h.Resources[pick(ids)+pick(ids)] = s
		}
	}
	return h
}

// compactJSON is b without insignificant whitespace (protojson varies
// its whitespace on purpose).
func compactJSON(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return out.Bytes()
}

// checkRecordJSON checks AppendLeaseRecordJSON against protojson.Marshal
// for h: the same bytes once compacted, or the hand encoder declining
// (protojson may then write or refuse it).
func checkRecordJSON(t testing.TB, h *allotpb.LeaseHorizon) {
	t.Helper()
	prefix := []byte("prefix")
	got, ok := AppendLeaseRecordJSON(prefix, h)
	want, err := protojson.Marshal(h)
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("encoded a record protojson refuses (%v): %s", err, got)
	}
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("lost what b held: %q", got)
	}
	if w, g := compactJSON(t, want), compactJSON(t, got[len(prefix):]); !bytes.Equal(w, g) {
		t.Fatalf("encodings differ\n got %s\nwant %s", g, w)
	}
}

// TestAppendLeaseRecordJSON checks the hand record encoder against
// protojson on random records, and that it writes every one of them (a
// record the ledger builds never needs protojson's path).
func TestAppendLeaseRecordJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	ids := []string{"", "db", "mysql/main", "a\"b\\c\u007f\u0085日本", "ctl\x01\n\t\u2028"}
	for range 3000 {
		h := randomRecord(rng, ids)
		if _, ok := AppendLeaseRecordJSON(nil, h); !ok {
			t.Fatalf("declined %v", h)
		}
		checkRecordJSON(t, h)
	}
	// What it declines: protojson refuses the first two and writes "-0".
	for name, h := range map[string]*allotpb.LeaseHorizon{
		"invalid UTF-8": {Resources: map[string]*allotpb.ResourceSummary{"ok": {HolderIds: []string{"a\xff"}}}},
		"bad nanos":     {Horizon: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}},
		"negative zero": {Resources: map[string]*allotpb.ResourceSummary{"r": {Ceiling: math.Copysign(0, -1)}}},
		"nil summary":   {Resources: map[string]*allotpb.ResourceSummary{"r": nil}},
		"year 10000":    {Horizon: &timestamppb.Timestamp{Seconds: 253402300800}},
	} {
		if b, ok := AppendLeaseRecordJSON(nil, h); ok {
			t.Errorf("%s: encoded as %s", name, b)
		}
	}
}

// FuzzAppendLeaseRecordJSON checks the hand record encoder against
// protojson for any ids, doubles and times.
func FuzzAppendLeaseRecordJSON(f *testing.F) {
	f.Add("db", "a/b", 1.5, int64(1.7e9), int32(5e8), uint64(3))
	f.Add("\xff", "", math.Inf(1), int64(-5), int32(0), uint64(0))
	f.Fuzz(func(t *testing.T, id, holder string, v float64, secs int64, nanos int32, digest uint64) {
		at := &timestamppb.Timestamp{Seconds: secs, Nanos: nanos}
		h := &allotpb.LeaseHorizon{Node: holder, Term: digest, Horizon: at, Resources: map[string]*allotpb.ResourceSummary{
			id: {Ceiling: v, LatestExpiry: at, HoldersDigest: digest, HolderIds: []string{holder, id}, UnlistedFloors: proto.Float64(v)},
		}}
		checkRecordJSON(t, h)
	})
}

// BenchmarkLeaseRecordJSON: a full record (1,500 summaries, each with a
// holder promise and ten ids) through protojson and by hand.
func BenchmarkLeaseRecordJSON(b *testing.B) {
	at := func(s int64) *timestamppb.Timestamp { return &timestamppb.Timestamp{Seconds: 1.8e9 + s, Nanos: 123e6} }
	h := &allotpb.LeaseHorizon{Node: "root", Term: 42, ServerId: "server-1", Horizon: at(60), Complete: true,
		HoldersKey: make([]byte, 32), Resources: map[string]*allotpb.ResourceSummary{}}
	for i := range 1500 {
		s := &allotpb.ResourceSummary{Ceiling: 100.0 / 3, LatestExpiry: at(int64(i % 60)), Holders: 10, HoldersDigest: uint64(i) * 0x9e3779b97f4a7c15,
			HoldersUntil: at(30), FloorCeiling: 50, FloorExpiry: at(300), UnlistedFloors: proto.Float64(0)}
		for j := range 10 {
			s.HolderIds = append(s.HolderIds, "client-"+strconv.Itoa(i*10+j))
		}
		h.Resources["resource/"+strconv.Itoa(i)] = s
	}
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			if _, err := protojson.Marshal(h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if _, ok := AppendLeaseRecordJSON(nil, h); !ok {
				b.Fatal("declined")
			}
		}
	})
}
