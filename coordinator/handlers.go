package coordinator

import (
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Error codes in the Nats-Service-Error-Code header.
const (
	CodeBadRequest     = 400
	CodeNoTemplate     = 404
	CodeNotImplemented = 501
	CodeUnavailable    = 503
	CodeTooMany        = 429
	CodeInternal       = 500
)

type reqKind uint8

const (
	kindGet reqKind = iota
	kindRelease
)

// request is a decoded, validated request waiting for its round.
type request struct {
	kind reqKind
	enc  wire.Encoding
	msg  micro.Request
	get  *allotpb.GetCapacityRequest
	rel  *allotpb.ReleaseCapacityRequest

	// Filled by the round.
	slots    []slot
	released int32
	errCode  int
	errText  string
}

// slot locates one requested resource's client record during a round.
type slot struct {
	r    *resource // nil when the resource is not served (see err)
	i    int32
	code int32
	err  string
}

func (c *Coordinator) handleGet(m micro.Request) {
	enc := wire.EncodingOf(nats.Header(m.Headers()))
	var req allotpb.GetCapacityRequest
	if err := decode(enc, m, &req, func() error { return wire.ValidateGetCapacity(&req) }); err != nil {
		c.replyError(m, enc, CodeBadRequest, err.Error())
		return
	}
	c.enqueue(&request{kind: kindGet, enc: enc, msg: m, get: &req})
}

func (c *Coordinator) handleRelease(m micro.Request) {
	enc := wire.EncodingOf(nats.Header(m.Headers()))
	var req allotpb.ReleaseCapacityRequest
	if err := decode(enc, m, &req, func() error { return wire.ValidateRelease(&req) }); err != nil {
		c.replyError(m, enc, CodeBadRequest, err.Error())
		return
	}
	c.enqueue(&request{kind: kindRelease, enc: enc, msg: m, rel: &req})
}

// handleServerGet validates GetServerCapacity requests; serving them is
// the hierarchy work's (see subjects.md), so valid ones get 501.
func (c *Coordinator) handleServerGet(m micro.Request) {
	enc := wire.EncodingOf(nats.Header(m.Headers()))
	var req allotpb.GetServerCapacityRequest
	if err := decode(enc, m, &req, func() error { return wire.ValidateGetServerCapacity(&req) }); err != nil {
		c.replyError(m, enc, CodeBadRequest, err.Error())
		return
	}
	c.replyError(m, enc, CodeNotImplemented, "GetServerCapacity is not served yet: coordinator hierarchies are not implemented in this version")
}

func decode(enc wire.Encoding, m micro.Request, msg proto.Message, validate func() error) error {
	if err := wire.Unmarshal(enc, m.Data(), msg); err != nil {
		return err
	}
	return validate()
}

// replyError answers, from the handler's own goroutine, with the micro
// error headers and an ErrorReply body in the request's encoding; micro
// counts it in the endpoint's STATS.
func (c *Coordinator) replyError(m micro.Request, enc wire.Encoding, code int, text string) {
	if err := m.Error(strconv.Itoa(code), text, errorBody(enc, code, text), micro.WithHeaders(micro.Headers{wire.HeaderContentType: {enc.ContentType()}})); err != nil && !errors.Is(err, micro.ErrRespond) {
		c.log.Debug("error reply failed", "err", err)
	}
}

func errorBody(enc wire.Encoding, code int, text string) []byte {
	body, err := wire.Marshal(enc, &allotpb.ErrorReply{Code: int32(code), Error: text})
	if err != nil {
		return nil
	}
	return body
}

// The round loop answers requests after their micro handler has returned.
// It publishes the replies itself instead of calling micro.Request's
// Respond or Error: those record their outcome in the request for the
// handler's bookkeeping, which races with micro's handler goroutine once
// the handler has returned (nats.go micro, request.respondError).

// roundError answers a queued request with an error, like replyError.
func (c *Coordinator) roundError(m micro.Request, enc wire.Encoding, code int, text string) {
	c.stats.errors++
	c.publish(m, nats.Header{
		micro.ErrorHeader:      {text},
		micro.ErrorCodeHeader:  {strconv.Itoa(code)},
		wire.HeaderContentType: {enc.ContentType()},
	}, errorBody(enc, code, text))
}

// reply answers with msg in the request's encoding. Binary replies carry
// no headers (see wire.ReplyEncodingOf): encoding a header on every reply
// costs measurable CPU here, at the server and at the client. JSON replies,
// meant for people and tools, say Content-Type: application/json.
func (c *Coordinator) reply(m micro.Request, enc wire.Encoding, msg proto.Message) {
	data, err := wire.Marshal(enc, msg)
	if err != nil {
		c.roundError(m, enc, CodeInternal, "encoding reply: "+err.Error())
		return
	}
	if enc == wire.JSON {
		c.publish(m, nats.Header{wire.HeaderContentType: {wire.ContentJSON}}, data)
		return
	}
	c.publish(m, nil, data)
}

// publish sends a reply to m's reply subject.
func (c *Coordinator) publish(m micro.Request, h nats.Header, data []byte) {
	if m.Reply() == "" {
		return // a publish, not a request: nobody to answer
	}
	if err := c.nc.PublishMsg(&nats.Msg{Subject: m.Reply(), Header: h, Data: data}); err != nil {
		c.log.Debug("reply failed", "err", err)
	}
}
