package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// msgRequest is a micro.Request over a message received on a plain
// subscription. The tenant endpoint needs the message itself: whether its
// header block was read to its end (reqinfo.CheckBlock) shows only in its
// wire size, which micro's requests hide.
type msgRequest struct{ m *nats.Msg }

var _ micro.Request = msgRequest{}

// Respond sends data as the reply, as micro does.
func (r msgRequest) Respond(data []byte, opts ...micro.RespondOpt) error {
	resp := &nats.Msg{Data: data}
	for _, o := range opts {
		o(resp)
	}
	if err := r.m.RespondMsg(resp); err != nil {
		return fmt.Errorf("%w: %w", micro.ErrRespond, err)
	}
	return nil
}

// RespondJSON sends v in JSON as the reply.
func (r msgRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return r.Respond(b, opts...)
}

// Error sends an error reply with micro's error headers.
func (r msgRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" || description == "" {
		return errors.Join(micro.ErrArgRequired, errors.New("error code and description"))
	}
	resp := &nats.Msg{Header: nats.Header{micro.ErrorHeader: {description}, micro.ErrorCodeHeader: {code}}, Data: data}
	for _, o := range opts {
		o(resp)
	}
	return r.m.RespondMsg(resp)
}

// Data returns the request's payload.
func (r msgRequest) Data() []byte { return r.m.Data }

// Headers returns the request's headers.
func (r msgRequest) Headers() micro.Headers { return micro.Headers(r.m.Header) }

// Subject returns the subject the request arrived on.
func (r msgRequest) Subject() string { return r.m.Subject }

// Reply returns the request's reply subject.
func (r msgRequest) Reply() string { return r.m.Reply }
