// Package reply answers allot's NATS requests the way subjects.md
// describes: successful replies in the request's encoding (JSON with a
// Content-Type header, binary protobuf with none), and errors with the NATS
// micro error headers and an ErrorReply body. The coordinator and the quota
// service share it.
package reply

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Error codes in the Nats-Service-Error-Code header.
const (
	CodeBadRequest      = 400
	CodeForbidden       = 403
	CodeNotFound        = 404
	CodeTooLarge        = 413
	CodeTooMany         = 429
	CodeInternal        = 500
	CodeNotImplemented  = 501
	CodeUnavailable     = 503
	CodeUnknownEndpoint = 404
)

// ErrorBody is the ErrorReply body of an error reply in encoding enc; nil
// if it cannot be encoded.
func ErrorBody(enc wire.Encoding, code int, text string) []byte {
	body, err := wire.Marshal(enc, &allotpb.ErrorReply{Code: int32(code), Error: text})
	if err != nil {
		return nil
	}
	return body
}

// RefusalBody is the ErrorReply body of an overloaded service's refusal
// in encoding enc: ErrorBody with retry_after, when it is positive.
func RefusalBody(enc wire.Encoding, code int, text string, retryAfter time.Duration) []byte {
	r := &allotpb.ErrorReply{Code: int32(code), Error: text}
	if retryAfter > 0 {
		r.RetryAfter = durationpb.New(retryAfter)
	}
	body, err := wire.Marshal(enc, r)
	if err != nil {
		return nil
	}
	return body
}

// Error answers m from its micro handler's own goroutine with an error:
// micro counts it in the endpoint's STATS. Failing to send is only an
// error for the requester, which times out, so it is not reported
// (micro.ErrRespond: e.g. a publish without a reply subject); other
// errors are.
func Error(m micro.Request, enc wire.Encoding, code int, text string) error {
	err := m.Error(strconv.Itoa(code), text, ErrorBody(enc, code, text),
		micro.WithHeaders(micro.Headers{wire.HeaderContentType: {enc.ContentType()}}))
	if errors.Is(err, micro.ErrRespond) {
		return nil
	}
	return err
}

// ErrorMsg is an error reply to subject, for answering after the micro
// handler has returned (micro.Request's Respond and Error then race with
// micro's own bookkeeping of the request).
func ErrorMsg(subject string, enc wire.Encoding, code int, text string) *nats.Msg {
	return &nats.Msg{Subject: subject, Header: nats.Header{
		micro.ErrorHeader:      {text},
		micro.ErrorCodeHeader:  {strconv.Itoa(code)},
		wire.HeaderContentType: {enc.ContentType()},
	}, Data: ErrorBody(enc, code, text)}
}

// Msg is a successful reply to subject with data encoded in enc. Binary
// replies carry no headers (see wire.ReplyEncodingOf): encoding a header
// on every reply costs measurable CPU at the server, at the client and
// here. JSON replies, meant for people and tools, say Content-Type:
// application/json.
func Msg(subject string, enc wire.Encoding, data []byte) *nats.Msg {
	m := &nats.Msg{Subject: subject, Data: data}
	if enc == wire.JSON {
		m.Header = nats.Header{wire.HeaderContentType: {wire.ContentJSON}}
	}
	return m
}

// Marshal encodes msg in enc as a reply to subject.
func Marshal(subject string, enc wire.Encoding, msg proto.Message) (*nats.Msg, error) {
	data, err := wire.Marshal(enc, msg)
	if err != nil {
		return nil, fmt.Errorf("encoding reply: %w", err)
	}
	return Msg(subject, enc, data), nil
}
