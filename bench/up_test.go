package bench

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// TestScaleJSONRequest: the up benchmark's hand-written JSON request is
// the scale benchmark's request, as the coordinator's decoder and
// protojson both read it, at every width of the client number.
func TestScaleJSONRequest(t *testing.T) {
	for _, i := range []int{0, 7, 42, 999, 123_456, 1_000_000, 9_999_999} {
		data := appendScaleRequest([]byte("stale"), wire.JSON, i, 1_000_000)[len("stale"):]
		want := scaleRequest(i, 1_000_000)
		var fast allotpb.GetCapacityRequest
		if err := wire.DecodeGetCapacity(wire.JSON, data, &fast); err != nil {
			t.Fatalf("client %d: %s: %v", i, data, err)
		}
		if !proto.Equal(&fast, want) {
			t.Errorf("client %d: %s decodes to %v, want %v", i, data, &fast, want)
		}
		var slow allotpb.GetCapacityRequest
		if err := wire.Unmarshal(wire.JSON, data, &slow); err != nil || !proto.Equal(&slow, want) {
			t.Errorf("client %d: protojson reads %s as %v (%v), want %v", i, data, &slow, err, want)
		}
		if !strings.Contains(string(data), `"client_id":"scale-client-`) {
			t.Errorf("client %d: %s does not use the proto field names", i, data)
		}
	}
}

// TestUpEchoReplySize: filled with JSON requests without headers, a
// coordinator's replies are JSON; the echo the up benchmark measures
// against answers the same request with the median real reply's size
// and the same Content-Type.
func TestUpEchoReplySize(t *testing.T) {
	s := natstest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := natstest.Conn(t, s)
	c, err := startCoordinator(ctx, nc, coordOptions{node: "upjson", tmpl: benchTemplate(1500, time.Minute, 10*time.Second)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	subject := coordinator.Subject("upjson", "capacity.get")
	const n = 300
	if err := fillLeases(ctx, &Env{Short: true}, s.ClientURL(), subject, n, 64, wire.JSON, time.Minute); err != nil {
		t.Fatal(err)
	}
	sizes, err := replySizes(nc, subject, n, 16)
	if err != nil {
		t.Fatal(err)
	}
	size := sizes[len(sizes)/2]
	if size < 50 {
		t.Fatalf("real reply sizes %v: too small for a lease in JSON", sizes)
	}
	sub, err := serveEcho(nc, echoSubject, size)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req := appendScaleRequest(nil, wire.JSON, 5, n)
	coord, err := nc.RequestMsg(&nats.Msg{Subject: subject, Data: req}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	echo, err := nc.RequestMsg(&nats.Msg{Subject: echoSubject, Data: req}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(echo.Data) != size {
		t.Errorf("echo replied %d bytes, want the real replies' median %d (sizes %v)", len(echo.Data), size, sizes)
	}
	if got, want := echo.Header.Get(wire.HeaderContentType), coord.Header.Get(wire.HeaderContentType); got != want || want != wire.ContentJSON {
		t.Errorf("echo's Content-Type %q, the coordinator's %q; want both %q", got, want, wire.ContentJSON)
	}
}
