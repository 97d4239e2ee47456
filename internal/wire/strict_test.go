package wire

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// withUnknown returns m with an unknown varint field 99 added.
func withUnknown[M proto.Message](m M) M {
	m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	return m
}

// TestProtobufUnknownFields checks that binary protobuf requests with a
// field this version does not know are rejected wherever the field is,
// as they are in JSON.
func TestProtobufUnknownFields(t *testing.T) {
	lease := func() *allotpb.Lease {
		return &allotpb.Lease{Capacity: 1, ExpiryTime: timestamppb.New(time.Unix(1e9, 0)), RefreshInterval: durationpb.New(time.Second)}
	}
	get := func(f func(*allotpb.ResourceRequest)) *allotpb.GetCapacityRequest {
		r := &allotpb.ResourceRequest{ResourceId: "r", Wants: 1, Has: lease()}
		f(r)
		return &allotpb.GetCapacityRequest{ClientId: "c", Resource: []*allotpb.ResourceRequest{{ResourceId: "q"}, r}}
	}
	server := func(f func(*allotpb.ServerCapacityResourceRequest)) *allotpb.GetServerCapacityRequest {
		r := &allotpb.ServerCapacityResourceRequest{ResourceId: "r", Has: lease(), Wants: []*allotpb.PriorityBandAggregate{{NumClients: 1}, {Priority: 1, NumClients: 1}}}
		f(r)
		return &allotpb.GetServerCapacityRequest{ServerId: "s", Resource: []*allotpb.ServerCapacityResourceRequest{r}}
	}
	// wantsAsVarint sends field 4 (wants, a double) with the varint wire type.
	wantsAsVarint := get(func(*allotpb.ResourceRequest) {})
	wantsAsVarint.Resource[1].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 7))
	tests := []struct {
		name string
		msg  proto.Message
		want string // "" for valid
	}{
		{"valid get", get(func(*allotpb.ResourceRequest) {}), ""},
		{"valid server", server(func(*allotpb.ServerCapacityResourceRequest) {}), ""},
		{"get top level", withUnknown(get(func(*allotpb.ResourceRequest) {})), "cannot decode protobuf GetCapacityRequest: GetCapacityRequest: unknown field 99 (wire type 0)"},
		{"get resource", get(func(r *allotpb.ResourceRequest) { withUnknown(r) }), "GetCapacityRequest: resource[1]: ResourceRequest: unknown field 99"},
		{"get has", get(func(r *allotpb.ResourceRequest) { withUnknown(r.Has) }), "resource[1].has: Lease: unknown field 99"},
		{"get has.expiry_time", get(func(r *allotpb.ResourceRequest) { withUnknown(r.Has.ExpiryTime) }), "resource[1].has.expiry_time: Timestamp: unknown field 99"},
		{"get has.refresh_interval", get(func(r *allotpb.ResourceRequest) { withUnknown(r.Has.RefreshInterval) }), "resource[1].has.refresh_interval: Duration: unknown field 99"},
		{"get wrong wire type", wantsAsVarint, "resource[1]: ResourceRequest: field 4 (wants) has wire type 0, which does not fit its type double"},
		{"release", withUnknown(&allotpb.ReleaseCapacityRequest{ClientId: "c", ResourceId: []string{"r"}}), "ReleaseCapacityRequest: unknown field 99"},
		{"server top level", withUnknown(server(func(*allotpb.ServerCapacityResourceRequest) {})), "GetServerCapacityRequest: unknown field 99"},
		{"server resource", server(func(r *allotpb.ServerCapacityResourceRequest) { withUnknown(r) }), "resource[0]: ServerCapacityResourceRequest: unknown field 99"},
		{"server has", server(func(r *allotpb.ServerCapacityResourceRequest) { withUnknown(r.Has) }), "resource[0].has: Lease: unknown field 99"},
		{"server has.expiry_time", server(func(r *allotpb.ServerCapacityResourceRequest) { withUnknown(r.Has.ExpiryTime) }), "resource[0].has.expiry_time: Timestamp"},
		{"server band", server(func(r *allotpb.ServerCapacityResourceRequest) { withUnknown(r.Wants[1]) }), "resource[0].wants[1]: PriorityBandAggregate: unknown field 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := proto.Marshal(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			out := tt.msg.ProtoReflect().New().Interface()
			checkErr(t, Unmarshal(Protobuf, data, out), tt.want)
		})
	}
}

// TestRepliesKeepUnknownFields checks that replies stay readable when a
// newer coordinator adds fields.
func TestRepliesKeepUnknownFields(t *testing.T) {
	data, err := proto.Marshal(withUnknown(&allotpb.GetCapacityResponse{Term: 3}))
	if err != nil {
		t.Fatal(err)
	}
	var resp allotpb.GetCapacityResponse
	if err := Unmarshal(Protobuf, data, &resp); err != nil || resp.GetTerm() != 3 {
		t.Fatalf("reply with an unknown field: %v, %v", &resp, err)
	}
}

// checkErr fails t unless err is nil (want "") or a bad request that
// mentions want.
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("rejected a valid request: %v", err)
		}
		return
	}
	if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want a bad request mentioning %q", err, want)
	}
}
