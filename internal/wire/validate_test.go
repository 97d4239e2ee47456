package wire

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

var minusZero = math.Copysign(0, -1)

// TestValidateGetCapacityNumbers checks every numeric field of a
// GetCapacityRequest at and beyond its limits.
func TestValidateGetCapacityNumbers(t *testing.T) {
	dur := func(s int64, n int32) *durationpb.Duration { return &durationpb.Duration{Seconds: s, Nanos: n} }
	ts := func(s int64, n int32) *timestamppb.Timestamp { return &timestamppb.Timestamp{Seconds: s, Nanos: n} }
	type res = allotpb.ResourceRequest
	tests := []struct {
		name   string
		mutate func(*res)
		want   string
	}{
		{"wants 0", func(r *res) { r.Wants = 0 }, ""},
		{"wants at limit", func(r *res) { r.Wants = MaxWants }, ""},
		{"wants NaN", func(r *res) { r.Wants = math.NaN() }, "resource[0]: bad request: wants is NaN"},
		{"wants +Inf", func(r *res) { r.Wants = math.Inf(1) }, "wants is infinite"},
		{"wants -Inf", func(r *res) { r.Wants = math.Inf(-1) }, "wants is infinite"},
		{"wants negative", func(r *res) { r.Wants = -1 }, "wants is negative"},
		{"wants tiny negative", func(r *res) { r.Wants = -math.SmallestNonzeroFloat64 }, "wants is negative"},
		{"wants huge", func(r *res) { r.Wants = MaxWants * 1.0000001 }, "wants is 1.0000001e+15; the limit is 1e+15"},
		{"wants max float", func(r *res) { r.Wants = math.MaxFloat64 }, "the limit is 1e+15"},
		{"priority at limits", func(r *res) { r.Priority = MinPriority }, ""},
		{"priority above", func(r *res) { r.Priority = MaxPriority + 1 }, "priority 1001 is outside [-1000, 1000]"},
		{"priority min int32", func(r *res) { r.Priority = math.MinInt32 }, "priority -2147483648 is outside"},
		{"has.capacity NaN", func(r *res) { r.Has = &allotpb.Lease{Capacity: math.NaN()} }, "has.capacity is NaN"},
		{"has.capacity -Inf", func(r *res) { r.Has = &allotpb.Lease{Capacity: math.Inf(-1)} }, "has.capacity is infinite"},
		{"has.capacity negative", func(r *res) { r.Has = &allotpb.Lease{Capacity: -5} }, "has.capacity is negative"},
		{"has.capacity huge", func(r *res) { r.Has = &allotpb.Lease{Capacity: 1e300} }, "has.capacity is 1e+300"},
		{"has expiry at epoch", func(r *res) { r.Has = &allotpb.Lease{ExpiryTime: ts(0, 0)} }, ""},
		{"has expiry at limit", func(r *res) { r.Has = &allotpb.Lease{ExpiryTime: ts(maxExpirySeconds, 999_999_999)} }, ""},
		{"has expiry before epoch", func(r *res) { r.Has = &allotpb.Lease{ExpiryTime: ts(-1, 0)} }, "has.expiry_time 1969-12-31T23:59:59Z is outside [1970-01-01T00:00:00Z, 2262-04-11T23:47:15Z]"},
		{"has expiry after int64 nanos", func(r *res) { r.Has = &allotpb.Lease{ExpiryTime: ts(maxExpirySeconds+1, 0)} }, "is outside"},
		{"has expiry year 10000", func(r *res) { r.Has = &allotpb.Lease{ExpiryTime: ts(253402300800, 0)} }, "has.expiry_time"},
		{"has expiry min int64", func(r *res) { r.Has = &allotpb.Lease{ExpiryTime: ts(math.MinInt64, 0)} }, "has.expiry_time"},
		{"has expiry negative nanos", func(r *res) { r.Has = &allotpb.Lease{ExpiryTime: ts(1, -1)} }, "has.expiry_time"},
		{"has expiry nanos overflow", func(r *res) { r.Has = &allotpb.Lease{ExpiryTime: ts(1, 1e9)} }, "has.expiry_time"},
		{"has refresh 0", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: dur(0, 0)} }, ""},
		{"has refresh at limit", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: durationpb.New(MaxLeaseLength)} }, ""},
		{"has refresh -5s", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: dur(-5, 0)} }, "has.refresh_interval -5s is negative"},
		{"has refresh -1ns", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: dur(0, -1)} }, "has.refresh_interval -1ns is negative"},
		{"has refresh too long", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: dur(86400, 1)} }, "has.refresh_interval 24h0m0.000000001s is longer than the limit of 24h0m0s"},
		{"has refresh 10000 years", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: dur(315576000000, 0)} }, "longer than the limit"},
		{"has refresh beyond proto range", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: dur(math.MaxInt64, 0)} }, "has.refresh_interval"},
		{"has refresh mixed signs", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: dur(1, -1)} }, "has.refresh_interval"},
		{"has refresh nanos overflow", func(r *res) { r.Has = &allotpb.Lease{RefreshInterval: dur(0, 1e9)} }, "has.refresh_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &allotpb.GetCapacityRequest{ClientId: "c", Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: 1}}}
			tt.mutate(r.Resource[0])
			checkErr(t, ValidateGetCapacity(r), tt.want)
		})
	}
}

func TestValidateGetServerCapacityNumbers(t *testing.T) {
	type res = allotpb.ServerCapacityResourceRequest
	band := func(p int32, n int64, w float64) *allotpb.PriorityBandAggregate {
		return &allotpb.PriorityBandAggregate{Priority: p, NumClients: n, Wants: w}
	}
	tests := []struct {
		name   string
		mutate func(*allotpb.GetServerCapacityRequest, *res)
		want   string
	}{
		{"valid", func(*allotpb.GetServerCapacityRequest, *res) {}, ""},
		{"outstanding NaN", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Outstanding = math.NaN() }, "resource[0]: bad request: outstanding is NaN"},
		{"outstanding +Inf", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Outstanding = math.Inf(1) }, "outstanding is infinite"},
		{"outstanding negative", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Outstanding = -1 }, "outstanding is negative"},
		{"outstanding huge", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Outstanding = 2e15 }, "outstanding is 2e+15"},
		{"has refresh negative", func(_ *allotpb.GetServerCapacityRequest, r *res) {
			r.Has = &allotpb.Lease{RefreshInterval: durationpb.New(-5 * time.Second)}
		}, "has.refresh_interval -5s is negative"},
		{"has expiry out of range", func(_ *allotpb.GetServerCapacityRequest, r *res) {
			r.Has = &allotpb.Lease{ExpiryTime: &timestamppb.Timestamp{Seconds: -100}}
		}, "has.expiry_time"},
		{"band wants NaN", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants[0].Wants = math.NaN() }, "resource[0]: wants[0]: bad request: wants is NaN"},
		{"band wants -Inf", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants[0].Wants = math.Inf(-1) }, "wants is infinite"},
		{"band wants negative", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants[0].Wants = -3 }, "wants is negative"},
		{"band wants huge", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants[0].Wants = 1e16 }, "the limit is 1e+15"},
		{"band priority", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants[0].Priority = -1001 }, "priority -1001 is outside"},
		{"band priority twice", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants = append(r.Wants, band(0, 1, 1)) }, "wants[1]: bad request: priority 0 appears twice"},
		{"num_clients 0", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants[0].NumClients = 0 }, "num_clients 0 is outside [1, 1099511627776]"},
		{"num_clients negative", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants[0].NumClients = math.MinInt64 }, "num_clients -9223372036854775808 is outside"},
		{"num_clients huge", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants[0].NumClients = maxSubclientsPerBand + 1 }, "num_clients 1099511627777 is outside"},
		{"no bands", func(_ *allotpb.GetServerCapacityRequest, r *res) { r.Wants = nil }, "no priority bands"},
		{"too many bands in one resource", func(_ *allotpb.GetServerCapacityRequest, r *res) {
			r.Wants = nil
			for p := MinPriority; p <= MaxPriority+1; p++ {
				r.Wants = append(r.Wants, band(int32(p), 1, 1))
			}
		}, "2002 priority bands; at most 2001"},
		{"too many bands in the request", func(q *allotpb.GetServerCapacityRequest, r *res) {
			for i := range 3 {
				x := &res{ResourceId: "r" + string(rune('a'+i))}
				for p := range 1500 {
					x.Wants = append(x.Wants, band(int32(p-750), 1, 1))
				}
				q.Resource = append(q.Resource, x)
			}
		}, "4501 priority bands in one request; the limit is 4096"},
		{"resource twice", func(q *allotpb.GetServerCapacityRequest, r *res) { q.Resource = append(q.Resource, q.Resource[0]) }, "resource[1]: resource_id \"r\" appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := &allotpb.GetServerCapacityRequest{ServerId: "s", Resource: []*res{{ResourceId: "r", Wants: []*allotpb.PriorityBandAggregate{band(0, 1, 1)}}}}
			tt.mutate(q, q.Resource[0])
			checkErr(t, ValidateGetServerCapacity(q), tt.want)
		})
	}
}

func TestValidateReleaseNames(t *testing.T) {
	r := &allotpb.ReleaseCapacityRequest{ClientId: "c", ResourceId: []string{"a", "b c"}}
	checkErr(t, ValidateRelease(r), "resource_id[1]: bad request: resource_id \"b c\" contains a space")
}

// TestNegativeZeroNormalised checks that validation turns every -0
// amount of a request into +0, so no reply computed from it carries -0.
func TestNegativeZeroNormalised(t *testing.T) {
	g := &allotpb.GetCapacityRequest{ClientId: "c", Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: minusZero, Has: &allotpb.Lease{Capacity: minusZero}}}}
	if err := ValidateGetCapacity(g); err != nil {
		t.Fatal(err)
	}
	if math.Signbit(g.Resource[0].Wants) || math.Signbit(g.Resource[0].Has.Capacity) {
		t.Fatalf("-0 kept: %v", g)
	}
	s := &allotpb.GetServerCapacityRequest{ServerId: "s", Resource: []*allotpb.ServerCapacityResourceRequest{{
		ResourceId: "r", Outstanding: minusZero, Has: &allotpb.Lease{Capacity: minusZero},
		Wants: []*allotpb.PriorityBandAggregate{{NumClients: 1, Wants: minusZero}},
	}}}
	if err := ValidateGetServerCapacity(s); err != nil {
		t.Fatal(err)
	}
	r := s.Resource[0]
	if math.Signbit(r.Outstanding) || math.Signbit(r.Has.Capacity) || math.Signbit(r.Wants[0].Wants) {
		t.Fatalf("-0 kept: %v", s)
	}
}

// TestJSONNumbers drives the cases people type with the nats CLI through
// the JSON decoder and validation.
func TestJSONNumbers(t *testing.T) {
	tests := []struct{ name, res, want string }{
		{"wants -0", `{"resource_id":"r","wants":-0}`, ""},
		{"wants NaN", `{"resource_id":"r","wants":"NaN"}`, "wants is NaN"},
		{"wants Infinity", `{"resource_id":"r","wants":"Infinity"}`, "wants is infinite"},
		{"wants -Infinity", `{"resource_id":"r","wants":"-Infinity"}`, "wants is infinite"},
		{"wants 1e308", `{"resource_id":"r","wants":1e308}`, "the limit is 1e+15"},
		{"wants 1e309", `{"resource_id":"r","wants":1e309}`, "cannot decode JSON"},
		{"refresh -5s", `{"resource_id":"r","has":{"refresh_interval":"-5s"}}`, "has.refresh_interval -5s is negative"},
		{"refresh -0.5s", `{"resource_id":"r","has":{"refresh_interval":"-0.5s"}}`, "has.refresh_interval -500ms is negative"},
		{"refresh 25h", `{"resource_id":"r","has":{"refresh_interval":"90000s"}}`, "longer than the limit of 24h0m0s"},
		{"expiry before 1970", `{"resource_id":"r","has":{"expiry_time":"1969-07-20T20:17:00Z"}}`, "has.expiry_time 1969-07-20T20:17:00Z is outside"},
		{"expiry 9999", `{"resource_id":"r","has":{"expiry_time":"9999-12-31T23:59:59Z"}}`, "has.expiry_time 9999-12-31T23:59:59Z is outside"},
		{"has.capacity -1", `{"resource_id":"r","has":{"capacity":-1}}`, "has.capacity is negative"},
		{"priority 1e3+1", `{"resource_id":"r","priority":1001}`, "priority 1001 is outside"},
		{"priority beyond int32", `{"resource_id":"r","priority":2147483648}`, "cannot decode JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g allotpb.GetCapacityRequest
			err := Unmarshal(JSON, []byte(`{"client_id":"c","resource":[`+tt.res+`]}`), &g)
			if err == nil {
				err = ValidateGetCapacity(&g)
			}
			checkErr(t, err, tt.want)
			if err == nil && math.Signbit(g.GetResource()[0].GetWants()) {
				t.Fatal("wants -0 kept")
			}
		})
	}
}
