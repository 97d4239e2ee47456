package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// partialReply is a GetCapacity reply with one served resource and one
// that failed, as a partial 404 is sent.
func partialReply() *allotpb.GetCapacityResponse {
	return &allotpb.GetCapacityResponse{Term: 7, Response: []*allotpb.ResourceResponse{
		{ResourceId: "db", Gets: &allotpb.Lease{Capacity: 5, ExpiryTime: timestamppb.New(time.Unix(1_795_000_000, 0)), RefreshInterval: durationpb.New(5 * time.Second)}},
		{ResourceId: "dbb", Error: "resource \"dbb\" matches no template", ErrorCode: 404},
	}}
}

// TestJSONReplyFields checks what subjects.md promises of JSON replies:
// every scalar field present, even at its zero value, and a message field
// that is not set left out rather than written as null.
func TestJSONReplyFields(t *testing.T) {
	data, err := Marshal(JSON, partialReply())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "null") {
		t.Fatalf("JSON reply carries null: %s", data)
	}
	var got struct {
		Response []map[string]json.RawMessage `json:"response"`
		Term     json.RawMessage              `json:"term"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Term) != `"7"` {
		t.Errorf("term = %s, want the JSON string \"7\"", got.Term)
	}
	served, failed := got.Response[0], got.Response[1]
	for _, k := range []string{"resource_id", "gets", "safe_capacity", "error", "error_code"} {
		if _, ok := served[k]; !ok {
			t.Errorf("served resource lacks %q: %s", k, data)
		}
	}
	if string(served["error"]) != `""` || string(served["error_code"]) != "0" || string(served["safe_capacity"]) != "0" {
		t.Errorf("zero values not written as such: %s", data)
	}
	if _, ok := failed["gets"]; ok {
		t.Errorf("failed resource has gets: %s", data)
	}
	if string(failed["error_code"]) != "404" || string(failed["safe_capacity"]) != "0" {
		t.Errorf("failed resource: %s", data)
	}

	for m, want := range map[proto.Message]string{
		&allotpb.ReleaseCapacityResponse{}: `{"released":0,"term":"0"}`,
		&allotpb.GetCapacityResponse{}:     `{"response":[],"term":"0"}`,
	} {
		data, err := Marshal(JSON, m)
		var buf bytes.Buffer
		if err != nil || json.Compact(&buf, data) != nil || buf.String() != want {
			t.Errorf("empty %T = %s, %v; want %s", m, data, err, want)
		}
	}
}

// TestNoNegativeZeroInReplies checks both reply encoders: a -0 the
// coordinator computes reaches clients as 0.
func TestNoNegativeZeroInReplies(t *testing.T) {
	z := math.Copysign(0, -1)
	resp := partialReply()
	resp.Response[0].Gets.Capacity = z
	resp.Response[0].SafeCapacity = z
	for _, enc := range []Encoding{JSON, Protobuf} {
		data, err := Marshal(enc, proto.Clone(resp))
		if err != nil {
			t.Fatal(err)
		}
		if enc == JSON && strings.Contains(string(data), "-0") {
			t.Errorf("JSON reply carries -0: %s", data)
		}
		var back allotpb.GetCapacityResponse
		if err := Unmarshal(enc, data, &back); err != nil {
			t.Fatal(err)
		}
		if r := back.GetResponse()[0]; math.Signbit(r.GetGets().GetCapacity()) || math.Signbit(r.GetSafeCapacity()) {
			t.Errorf("%s reply carries -0: %v", enc, r)
		}
	}
	data := AppendGetCapacityResponse(nil, 1, []LeaseReply{{ResourceID: "db", Capacity: z, SafeCapacity: z}})
	var back allotpb.GetCapacityResponse
	if err := Unmarshal(Protobuf, data, &back); err != nil {
		t.Fatal(err)
	}
	if r := back.GetResponse()[0]; math.Signbit(r.GetGets().GetCapacity()) || math.Signbit(r.GetSafeCapacity()) {
		t.Errorf("fast reply carries -0: %v", r)
	}
}
