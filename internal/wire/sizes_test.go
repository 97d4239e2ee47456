package wire

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// longID returns a valid id of MaxIDLen bytes made of c, distinct for
// each i.
func longID(c string, i int) string {
	s := strconv.Itoa(i)
	return s + strings.Repeat(c, MaxIDLen-len(s))
}

// longestLease is a lease with every field set to its longest encoding.
func longestLease() *allotpb.Lease {
	return &allotpb.Lease{
		Capacity:        2.2250738585072014e-308, // longest shortest-form double
		ExpiryTime:      &timestamppb.Timestamp{Seconds: maxExpirySeconds, Nanos: 999_999_999},
		RefreshInterval: &durationpb.Duration{Seconds: int64(MaxLeaseLength/time.Second) - 1, Nanos: 999_999_999},
	}
}

// largestGetCapacity is the largest valid GetCapacityRequest when its
// ids are made of c.
func largestGetCapacity(c string, n int) *allotpb.GetCapacityRequest {
	r := &allotpb.GetCapacityRequest{ClientId: longID(c, 0)}
	for i := range n {
		r.Resource = append(r.Resource, &allotpb.ResourceRequest{
			ResourceId: longID(c, i), Priority: MinPriority, Has: longestLease(), Wants: 2.2250738585072014e-308,
		})
	}
	return r
}

// largestServerRequest is the largest valid GetServerCapacityRequest:
// every resource at its longest, and MaxBandsPerReq bands spread over
// them.
func largestServerRequest() *allotpb.GetServerCapacityRequest {
	r := &allotpb.GetServerCapacityRequest{ServerId: longID("x", 0)}
	for i := range MaxResourcesPerReq {
		r.Resource = append(r.Resource, &allotpb.ServerCapacityResourceRequest{
			ResourceId: longID("x", i), Has: longestLease(), Outstanding: 2.2250738585072014e-308,
		})
	}
	for b := range MaxBandsPerReq {
		res := r.Resource[b%MaxResourcesPerReq]
		res.Wants = append(res.Wants, &allotpb.PriorityBandAggregate{
			Priority: MinPriority + int32(b/MaxResourcesPerReq), NumClients: maxSubclientsPerBand, Wants: 2.2250738585072014e-308,
		})
	}
	return r
}

// TestLargestRequestsFit checks that the size limits admit the largest
// valid requests, as the limits' documentation claims, and that they
// decode and validate.
func TestLargestRequestsFit(t *testing.T) {
	release := &allotpb.ReleaseCapacityRequest{ClientId: longID(`"`, 0)}
	for i := range MaxResourcesPerReq {
		release.ResourceId = append(release.ResourceId, longID(`"`, i))
	}
	indented := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}
	tests := []struct {
		name string
		enc  Encoding
		msg  proto.Message
		json protojson.MarshalOptions
	}{
		{"GetCapacity", Protobuf, largestGetCapacity("x", MaxResourcesPerReq), jsonOut},
		{"GetCapacity", JSON, largestGetCapacity("x", MaxResourcesPerReq), jsonOut},
		{"GetCapacity escaped ids", JSON, largestGetCapacity(`"`, MaxResourcesPerReq), jsonOut},
		{"GetCapacity indented", JSON, largestGetCapacity("x", MaxResourcesPerReq), indented},
		{"ReleaseCapacity", Protobuf, release, jsonOut},
		{"ReleaseCapacity escaped ids indented", JSON, release, indented},
		{"GetServerCapacity", Protobuf, largestServerRequest(), jsonOut},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.enc.String(), func(t *testing.T) {
			data, err := proto.Marshal(tt.msg)
			if tt.enc == JSON {
				data, err = tt.json.Marshal(tt.msg)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d bytes; limit %d", len(data), MaxRequestSize(tt.enc))
			if err := CheckSize(tt.enc, len(data)); err != nil {
				t.Fatal(err)
			}
			out := tt.msg.ProtoReflect().New().Interface()
			if err := Unmarshal(tt.enc, data, out); err != nil {
				t.Fatal(err)
			}
			var verr error
			switch m := out.(type) {
			case *allotpb.GetCapacityRequest:
				verr = ValidateGetCapacity(m)
			case *allotpb.ReleaseCapacityRequest:
				verr = ValidateRelease(m)
			case *allotpb.GetServerCapacityRequest:
				verr = ValidateGetServerCapacity(m)
			}
			if verr != nil {
				t.Fatalf("the largest request is not valid: %v", verr)
			}
		})
	}
}

func TestCheckSize(t *testing.T) {
	tests := []struct {
		enc  Encoding
		n    int
		want string
	}{
		{Protobuf, 0, ""},
		{Protobuf, MaxProtobufRequest, ""},
		{Protobuf, MaxProtobufRequest + 1, "request too large: 524289 bytes of protobuf; the limit is 524288 bytes (512 KiB): split the request (at most 1000 resources each)"},
		{JSON, MaxJSONRequest, ""},
		{JSON, MaxJSONRequest + 1, "request too large: 786433 bytes of JSON; the limit is 786432 bytes (768 KiB): split the request, or send binary protobuf (header Content-Type: application/protobuf), whose limit is 512 KiB"},
	}
	for _, tt := range tests {
		err := CheckSize(tt.enc, tt.n)
		if tt.want == "" {
			if err != nil {
				t.Errorf("CheckSize(%v, %d) = %v", tt.enc, tt.n, err)
			}
			continue
		}
		if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBadRequest) || err.Error() != tt.want {
			t.Errorf("CheckSize(%v, %d) = %v\nwant %s", tt.enc, tt.n, err, tt.want)
		}
	}
}

// TestUnmarshalOversized checks that Unmarshal refuses oversized requests
// before decoding them, whatever they hold, and leaves replies alone.
func TestUnmarshalOversized(t *testing.T) {
	for _, enc := range []Encoding{Protobuf, JSON} {
		data := make([]byte, MaxRequestSize(enc)+1)
		for _, m := range []proto.Message{&allotpb.GetCapacityRequest{}, &allotpb.ReleaseCapacityRequest{}, &allotpb.GetServerCapacityRequest{}} {
			if err := Unmarshal(enc, data, m); !errors.Is(err, ErrTooLarge) {
				t.Errorf("%v %T: err = %v, want ErrTooLarge", enc, m, err)
			}
		}
	}
	var resp allotpb.GetCapacityResponse
	big := make([]byte, 0, MaxProtobufRequest+300)
	for len(big) <= MaxProtobufRequest {
		big = AppendGetCapacityResponse(big, 0, []LeaseReply{{ResourceID: longID("x", len(big)), Capacity: 1}})
	}
	if err := Unmarshal(Protobuf, big, &resp); err != nil {
		t.Fatalf("a large reply: %v", err)
	}
}

func TestDecodeInline(t *testing.T) {
	for _, enc := range []Encoding{Protobuf, JSON} {
		data, err := Marshal(enc, agentRequest())
		if err != nil {
			t.Fatal(err)
		}
		if !DecodeInline(enc, len(data)) {
			t.Errorf("an agent's %v request of %d bytes is not decoded inline", enc, len(data))
		}
		if DecodeInline(enc, MaxRequestSize(enc)) {
			t.Errorf("a %v request at the size limit is decoded inline", enc)
		}
	}
	if !DecodeInline(Protobuf, InlineProtobufRequest) || DecodeInline(Protobuf, InlineProtobufRequest+1) ||
		!DecodeInline(JSON, InlineJSONRequest) || DecodeInline(JSON, InlineJSONRequest+1) {
		t.Error("inline limits are not where documented")
	}
}
