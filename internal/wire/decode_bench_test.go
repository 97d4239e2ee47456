package wire

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// agentRequest is what an agent sends for one resource it holds a lease on:
// the common request on the coordinator's hot path.
func agentRequest() *allotpb.GetCapacityRequest {
	return &allotpb.GetCapacityRequest{ClientId: "host-1:4242:9f86d081", Resource: []*allotpb.ResourceRequest{{
		ResourceId: "mysql/main", Wants: 33.5, Priority: 1,
		Has: &allotpb.Lease{Capacity: 30, ExpiryTime: timestamppb.New(time.Unix(1_795_000_000, 517_000_000)), RefreshInterval: durationpb.New(5 * time.Second)},
	}}}
}

// BenchmarkDecodeGetCapacity measures what the coordinator does with every
// GetCapacity request before queueing it: decode and validate.
func BenchmarkDecodeGetCapacity(b *testing.B) {
	for _, enc := range []Encoding{Protobuf, JSON} {
		data, err := Marshal(enc, agentRequest())
		if err != nil {
			b.Fatal(err)
		}
		b.Run(enc.String(), func(b *testing.B) {
			b.ReportAllocs()
			decodeGetCapacity(b, enc, data)
		})
		b.Run(enc.String()+"/reused", func(b *testing.B) {
			b.ReportAllocs()
			var req allotpb.GetCapacityRequest
			for b.Loop() {
				if err := DecodeGetCapacity(enc, data, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(enc.String()+"/reused+ids", func(b *testing.B) {
			b.ReportAllocs()
			var req allotpb.GetCapacityRequest
			ids := NewIDCache()
			for b.Loop() {
				if err := DecodeGetCapacityNames(enc, data, &req, ids.Name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// The plain JSON shape `nats req` users send (no lease held): the
	// fast path, where the agent's refresh above is not.
	plain := []byte(`{"client_id":"host-1:4242:9f86d081","resource":[{"resource_id":"mysql/main","wants":33.5,"priority":1}]}`)
	for _, ids := range []Names{nil, NewIDCache().Name} {
		name := "JSON-plain/reused"
		if ids != nil {
			name += "+ids"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var req allotpb.GetCapacityRequest
			for b.Loop() {
				if err := DecodeGetCapacityNames(JSON, plain, &req, ids); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	req := agentRequest()
	b.Run("unknown-fields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := strictRequest(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := ValidateGetCapacity(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func decodeGetCapacity(b *testing.B, enc Encoding, data []byte) {
	for b.Loop() {
		var req allotpb.GetCapacityRequest
		if err := Unmarshal(enc, data, &req); err != nil {
			b.Fatal(err)
		}
		if err := ValidateGetCapacity(&req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeLarge measures decoding and validating the largest
// requests of n resources (long ids), for the inline decoding limits.
func BenchmarkDecodeLarge(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		for _, enc := range []Encoding{Protobuf, JSON} {
			data, err := Marshal(enc, largestGetCapacity("x", n))
			if err != nil {
				b.Fatal(err)
			}
			b.Run(enc.String()+"/"+strconv.Itoa(n), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				decodeGetCapacity(b, enc, data)
			})
		}
	}
}
