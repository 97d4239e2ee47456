package wire

import (
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/proto/allotpb"
)

// TestUnmarshalGoDurations: every Duration of a JSON request, nested or
// in a list, is read in Go's syntax as in protojson's.
func TestUnmarshalGoDurations(t *testing.T) {
	var req allotpb.GetCapacityRequest
	body := `{"client_id":"c","resource":[{"resource_id":"a","wants":1,"has":{"capacity":1,"refresh_interval":"500ms"}},
	         {"resource_id":"b","wants":1,"has":{"capacity":1,"refresh_interval":"1.5s"}}]}`
	if err := Unmarshal(JSON, []byte(body), &req); err != nil {
		t.Fatal(err)
	}
	if a, b := req.Resource[0].GetHas().GetRefreshInterval().AsDuration(), req.Resource[1].GetHas().GetRefreshInterval().AsDuration(); a != 500*time.Millisecond || b != 1500*time.Millisecond {
		t.Errorf("refresh intervals %v, %v", a, b)
	}
	for _, bad := range []string{`"5 s"`, `"soon"`, `5`, `"5"`} {
		body := `{"client_id":"c","resource":[{"resource_id":"a","wants":1,"has":{"capacity":1,"refresh_interval":` + bad + `}}]}`
		if err := Unmarshal(JSON, []byte(body), &req); err == nil {
			t.Errorf("refresh_interval %s accepted", bad)
		}
	}
}

// TestFormatSeconds: what goDurations writes protojson reads as the same
// duration.
func TestFormatSeconds(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, -time.Nanosecond, 500 * time.Millisecond, -1500 * time.Millisecond,
		90 * time.Second, 744 * time.Hour, 1<<62 + 123, -(1<<62 + 7)} {
		s := formatSeconds(d)
		var pb durationpb.Duration
		if err := protojson.Unmarshal([]byte(`"`+s+`"`), &pb); err != nil || pb.AsDuration() != d || !protojsonDuration(s) {
			t.Errorf("%v: %q reads as %v (%v)", d, s, pb.AsDuration(), err)
		}
	}
}
