package reply_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/reply"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// A successful reply carries a Content-Type only when it is JSON: binary
// replies go without headers.
func TestMsg(t *testing.T) {
	for _, tc := range []struct {
		enc         wire.Encoding
		contentType string
	}{
		{wire.JSON, wire.ContentJSON},
		{wire.Protobuf, ""},
	} {
		m := reply.Msg("_INBOX.x", tc.enc, []byte("body"))
		if m.Subject != "_INBOX.x" || string(m.Data) != "body" || m.Header.Get(wire.HeaderContentType) != tc.contentType {
			t.Errorf("encoding %v: %+v", tc.enc, m)
		}
		if tc.contentType == "" && m.Header != nil {
			t.Errorf("encoding %v: a binary reply has headers %v", tc.enc, m.Header)
		}
	}
}

// Error replies say their code and text in micro's headers and in an
// ErrorReply body in the request's encoding, with retry_after only when
// there is one.
func TestErrorBodies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		enc   wire.Encoding
		retry time.Duration
	}{
		{"json", wire.JSON, 0},
		{"protobuf", wire.Protobuf, 0},
		{"json with retry", wire.JSON, 250 * time.Millisecond},
		{"protobuf with retry", wire.Protobuf, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r allotpb.ErrorReply
			if err := wire.Unmarshal(tc.enc, reply.RefusalBody(tc.enc, reply.CodeTooMany, "slow down", tc.retry), &r); err != nil {
				t.Fatal(err)
			}
			if r.GetCode() != reply.CodeTooMany || r.GetError() != "slow down" || r.GetRetryAfter().AsDuration() != tc.retry ||
				(tc.retry == 0) != (r.RetryAfter == nil) {
				t.Fatalf("refusal %+v", &r)
			}
			m := reply.ErrorMsg("_INBOX.y", tc.enc, reply.CodeBadRequest, "bad")
			if m.Header.Get(micro.ErrorHeader) != "bad" || m.Header.Get(micro.ErrorCodeHeader) != "400" ||
				m.Header.Get(wire.HeaderContentType) != tc.enc.ContentType() {
				t.Fatalf("error headers %v", m.Header)
			}
			r.Reset()
			if err := wire.Unmarshal(tc.enc, m.Data, &r); err != nil || r.GetCode() != reply.CodeBadRequest || r.GetError() != "bad" || r.RetryAfter != nil {
				t.Fatalf("error body %+v, %v", &r, err)
			}
		})
	}
}

// Marshal encodes a message as a reply in the encoding asked.
func TestMarshal(t *testing.T) {
	for _, enc := range []wire.Encoding{wire.JSON, wire.Protobuf} {
		m, err := reply.Marshal("_INBOX.z", enc, &allotpb.ReleaseCapacityResponse{Released: 3})
		if err != nil {
			t.Fatal(err)
		}
		var r allotpb.ReleaseCapacityResponse
		if err := wire.Unmarshal(enc, m.Data, &r); err != nil || r.GetReleased() != 3 {
			t.Fatalf("encoding %v: %+v, %v", enc, &r, err)
		}
	}
}
