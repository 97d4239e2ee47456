// Package rpc sends the agent's requests to allot's services over NATS and
// reads their error replies (the NATS micro convention: headers
// Nats-Service-Error-Code and Nats-Service-Error). It is shared by the
// lease loop and the quota client, which turn an error reply into their
// public *agent.ServiceError.
package rpc

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/wire"
)

// Headers of a NATS micro error reply.
const (
	errorCodeHeader = "Nats-Service-Error-Code"
	errorHeader     = "Nats-Service-Error"
)

// ErrorReply returns the code and description of an error reply; ok is
// false for an answer.
func ErrorReply(m *nats.Msg) (code int, description string, ok bool) {
	c := m.Header.Get(errorCodeHeader)
	if c == "" {
		return 0, "", false
	}
	n, _ := strconv.Atoi(c)
	return n, m.Header.Get(errorHeader), true
}

// RetryAfter is how long a refusal asks its receiver to wait before
// sending again (header Allot-Retry-After, in milliseconds: an overloaded
// service's 503, a tenant over its rate's 429); zero when it says nothing
// usable.
func RetryAfter(m *nats.Msg) time.Duration {
	ms, err := strconv.ParseInt(m.Header.Get(wire.HeaderRetryAfter), 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	// Bounded: a wait past a minute is not a service's advice but a bug
	// (bounded before it is multiplied, which could overflow).
	return time.Duration(min(ms, time.Minute.Milliseconds())) * time.Millisecond
}

// A Caller sends binary-protobuf requests on one connection.
type Caller struct {
	nc *nats.Conn
	// serviceError makes the error of an error reply.
	serviceError func(code int, description string, retryAfter time.Duration) error
}

// New returns a Caller on nc that reports an error reply as what
// serviceError makes of its code, description and retry-after wait.
func New(nc *nats.Conn, serviceError func(code int, description string, retryAfter time.Duration) error) *Caller {
	return &Caller{
		nc:           nc,
		serviceError: serviceError,
	}
}

// Protobuf sends req as binary protobuf to subj and decodes the reply into
// resp. It ends after timeout or when ctx ends, whichever comes first.
//
// The request says how long its sender waits (Allot-Timeout), so that an
// overloaded service drops it rather than answer it too late. A non-empty
// client names the lease holder sending it (Allot-Client), so that the
// service takes it before newcomers' requests.
func (c *Caller) Protobuf(ctx context.Context, timeout time.Duration, subj, client string, req, resp proto.Message) error {
	_, err := c.ProtobufReply(ctx, timeout, subj, client, req, resp)
	return err
}

// ProtobufReply is Protobuf that also returns the reply's headers (nil
// when nothing answered), an error reply's included.
func (c *Caller) ProtobufReply(ctx context.Context, timeout time.Duration, subj, client string, req, resp proto.Message) (nats.Header, error) {
	data, err := wire.Marshal(wire.Protobuf, req)
	if err != nil {
		return nil, fmt.Errorf("agent: encode request for %s: %w", subj, err)
	}
	hdr := nats.Header{
		wire.HeaderContentType: {wire.ContentProtobuf},
		wire.HeaderTimeout:     {strconv.FormatInt(timeout.Milliseconds(), 10)},
	}
	if client != "" {
		hdr[wire.HeaderClient] = []string{client}
	}
	msg := &nats.Msg{Subject: subj, Header: hdr, Data: data}
	var reply *nats.Msg
	if ctx.Done() == nil {
		// Without a context to watch, a plain timeout costs less.
		reply, err = c.nc.RequestMsg(msg, timeout)
	} else {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		reply, err = c.nc.RequestMsgWithContext(rctx, msg)
		cancel()
	}
	if err != nil {
		return nil, fmt.Errorf("agent: request %s: %w", subj, err)
	}
	h := reply.Header
	if h == nil {
		h = nats.Header{}
	}
	if code, desc, ok := ErrorReply(reply); ok {
		return h, fmt.Errorf("agent: request %s: %w", subj, c.serviceError(code, desc, RetryAfter(reply)))
	}
	if err := wire.Unmarshal(wire.ReplyEncodingOf(reply.Header), reply.Data, resp); err != nil {
		return h, fmt.Errorf("agent: reply from %s: %w", subj, err)
	}
	return h, nil
}
