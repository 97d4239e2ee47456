package wire_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// TestCoordinatorWire drives the wire checks through a real coordinator
// on an embedded NATS server, as a client sees them.
func TestCoordinatorWire(t *testing.T) {
	nc := natstest.Conn(t, natstest.Server(t))
	set := config.NewSet(1, []*config.Template{{
		Name: "t-db", Glob: "db", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second,
	}}, nil)
	coordtest.Start(t, nc, coordinator.Options{Templates: sources.StaticTemplates(set), RoundInterval: coordinator.NoRoundInterval})
	const subject = "allot.root.capacity.get"
	request := func(enc wire.Encoding, data []byte) *nats.Msg {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data = data
		msg.Header.Set(wire.HeaderContentType, enc.ContentType())
		m, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	wantError := func(m *nats.Msg, codes, text string) {
		t.Helper()
		code, got := m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error")
		if code == "" || !strings.Contains(codes, code) || !strings.Contains(got, text) {
			t.Fatalf("reply %q %q %s; want code in %s mentioning %q", code, got, m.Data, codes, text)
		}
	}

	t.Run("binary unknown field", func(t *testing.T) {
		data, err := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: "c", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		data = protowire.AppendVarint(protowire.AppendTag(data, 99, protowire.VarintType), 1)
		wantError(request(wire.Protobuf, data), "400", "GetCapacityRequest: unknown field 99")
	})
	t.Run("negative refresh interval", func(t *testing.T) {
		m := request(wire.JSON, []byte(`{"client_id":"c","resource":[{"resource_id":"db","has":{"refresh_interval":"-5s"}}]}`))
		wantError(m, "400", "has.refresh_interval -5s is negative")
	})
	t.Run("expiry out of range", func(t *testing.T) {
		m := request(wire.JSON, []byte(`{"client_id":"c","resource":[{"resource_id":"db","has":{"expiry_time":"9999-01-01T00:00:00Z"}}]}`))
		wantError(m, "400", "has.expiry_time 9999-01-01T00:00:00Z is outside")
	})
	t.Run("oversized JSON", func(t *testing.T) {
		// Above the JSON limit, below NATS' default max_payload.
		data := []byte(`{"client_id":"c","resource":[{"resource_id":"db","wants":1}],"x":"` + strings.Repeat("x", wire.MaxJSONRequest) + `"}`)
		wantError(request(wire.JSON, data), "413", "request too large")
	})
	t.Run("wants -0 in JSON", func(t *testing.T) {
		m := request(wire.JSON, []byte(`{"client_id":"z","resource":[{"resource_id":"db","wants":-0,"has":{"capacity":-0}}]}`))
		wire.CheckJSONReply(t, m.Data)
		if !strings.Contains(string(m.Data), `"capacity":0`) {
			t.Fatalf("reply: %s", m.Data)
		}
	})
	t.Run("wants -0 in protobuf", func(t *testing.T) {
		data, err := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: "zb", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: math.Copysign(0, -1)}}})
		if err != nil {
			t.Fatal(err)
		}
		m := request(wire.Protobuf, data)
		var resp allotpb.GetCapacityResponse
		if err := wire.Unmarshal(wire.ReplyEncodingOf(m.Header), m.Data, &resp); err != nil {
			t.Fatal(err)
		}
		if c := resp.GetResponse()[0].GetGets().GetCapacity(); c != 0 || math.Signbit(c) {
			t.Fatalf("capacity %g (sign bit %v)", c, math.Signbit(c))
		}
	})
	t.Run("partial 404 without null", func(t *testing.T) {
		m := request(wire.JSON, []byte(`{"client_id":"p","resource":[{"resource_id":"db","wants":5},{"resource_id":"other","wants":1}]}`))
		wire.CheckJSONReply(t, m.Data)
		var got struct {
			Response []map[string]json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal(m.Data, &got); err != nil || len(got.Response) != 2 {
			t.Fatalf("reply %s: %v", m.Data, err)
		}
		if _, ok := got.Response[1]["gets"]; ok || string(got.Response[1]["error_code"]) != "404" {
			t.Fatalf("failed resource: %s", m.Data)
		}
		for _, k := range []string{"gets", "safe_capacity", "error", "error_code"} {
			if _, ok := got.Response[0][k]; !ok {
				t.Fatalf("served resource lacks %q: %s", k, m.Data)
			}
		}
	})
}

// TestLeaseLimitsAgree guards the coupling between template limits and
// request validation: an agent echoes the refresh interval it was given
// in has.refresh_interval, so a template allowed a longer one than
// requests may carry would make every refresh of its clients fail.
func TestLeaseLimitsAgree(t *testing.T) {
	if config.MaxLeaseLength > wire.MaxLeaseLength {
		t.Fatalf("templates may set leases (and so refresh intervals) up to %s, requests carry at most %s", config.MaxLeaseLength, wire.MaxLeaseLength)
	}
}
