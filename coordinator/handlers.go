package coordinator

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/reply"
	"github.com/allot/allot/internal/reqinfo"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Error codes in the Nats-Service-Error-Code header.
const (
	CodeBadRequest      = reply.CodeBadRequest
	CodeNoTemplate      = reply.CodeNotFound
	CodeTooLarge        = reply.CodeTooLarge
	CodeTooMany         = reply.CodeTooMany
	CodeInternal        = reply.CodeInternal
	CodeNotImplemented  = reply.CodeNotImplemented
	CodeUnavailable     = reply.CodeUnavailable
	CodeUnknownEndpoint = reply.CodeUnknownEndpoint
)

type reqKind uint8

const (
	kindGet reqKind = iota
	kindRelease
	kindServer
)

// request is a decoded, validated request waiting for its round.
type request struct {
	kind reqKind
	enc  wire.Encoding
	msg  micro.Request
	get  *allotpb.GetCapacityRequest // set for kindGet only
	rel  *allotpb.ReleaseCapacityRequest
	srv  *allotpb.GetServerCapacityRequest
	// Messages a recycled request keeps for the next one to decode into
	// (see newRequest).
	getBuf  *allotpb.GetCapacityRequest
	relBuf  *allotpb.ReleaseCapacityRequest
	slotBuf []ledger.Slot
	// who sent it: a tenant's identity on the tenant subjects.
	who ledger.Claimant

	// Filled by the round.
	slots    []ledger.Slot
	sslots   []ledger.ServerSlot
	released int32
	errCode  int
	errText  string
}

// newcomer reports whether r is a client's request that the intake did
// not know as a holder's.
func (r *request) newcomer() bool {
	lr, ok := r.msg.(*leader.Request)
	return ok && r.kind != kindServer && lr.Class() == leader.ClassNewcomer
}

// handleCapacity serves allot.<node>.capacity.get and .release on one
// subscription, so one client's requests keep their order (a release
// published after a get is applied after it). Small requests are decoded
// here; large ones on the bulk lane, so that decoding them does not hold
// up everyone else's. A release while the bulk lane is busy goes through
// it too: it may follow a large get of the same client.
func (c *Coordinator) handleCapacity(m micro.Request) {
	c.serveCapacity(m, ledger.Claimant{})
}

// handleTenantMsg serves allot.t.<tenant>.<node>.capacity.get and
// .release, which a tenant's clients reach through their account's
// service import (see subjects.md): the server puts the importing
// account's name in the tenant token (account_token_position) and the
// authenticated user in the Nats-Request-Info header, overwriting any a
// client sets. The request's client id is bound to that identity. A
// header block that nats.go may not read as nats-server wrote it is
// refused (reqinfo.CheckBlock): it could hide the server's header.
func (c *Coordinator) handleTenantMsg(m micro.Request) {
	msg := m.(*leader.Request).Msg()
	tenant := subjects.TenantOf(m.Subject())
	err := reqinfo.CheckBlock(msg.Header, reqinfo.HeaderLen(msg))
	var info reqinfo.Info
	if err == nil {
		info, _, err = reqinfo.Parse(msg.Header)
	}
	var who ledger.Claimant
	if err == nil {
		who, err = ledger.NewClaimant(tenant, info.User)
	}
	if err != nil {
		c.countCall(m.Subject(), 0)
		c.replyError(m, encodingOf(m), CodeBadRequest, err.Error())
		return
	}
	c.serveCapacity(m, who)
}

// serveCapacity serves a capacity request sent by who.
func (c *Coordinator) serveCapacity(m micro.Request, who ledger.Claimant) {
	c.countCall(m.Subject(), 0)
	var kind reqKind
	switch op := m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]; op {
	case "get", "refresh":
		kind = kindGet
	case "release":
		kind = kindRelease
	default:
		enc := encodingOf(m)
		c.replyError(m, enc, CodeUnknownEndpoint, "unknown operation "+strconv.Quote(op)+": use capacity.get, capacity.refresh or capacity.release")
		return
	}
	// The intake refused what is over the size limit (Endpoint.CheckSize).
	enc, n := encodingOf(m), len(m.Data())
	it := bulkItem{m, kind, enc, who}
	if !wire.DecodeInline(enc, n) || kind == kindRelease && c.bulk.busy() {
		if !c.bulk.submit(it) {
			c.replyError(m, enc, CodeUnavailable, "too many large requests queued; retry shortly")
		}
		return
	}
	c.decode(it)
}

// decode decodes and validates a request and queues it for a round.
func (c *Coordinator) decode(it bulkItem) {
	m, enc := it.m, it.enc
	r := c.newRequest(it)
	var err error
	if it.kind == kindGet {
		if r.getBuf == nil {
			r.getBuf = &allotpb.GetCapacityRequest{}
		}
		r.get = r.getBuf
		err = wire.DecodeGetCapacityNames(enc, m.Data(), r.get, c.ids)
	} else {
		if r.relBuf == nil {
			r.relBuf = &allotpb.ReleaseCapacityRequest{}
		}
		r.rel = r.relBuf
		err = wire.DecodeReleaseNames(enc, m.Data(), r.rel, c.ids)
	}
	if err == nil {
		err = sameClient(m, r)
	}
	if err != nil {
		c.replyError(m, enc, CodeBadRequest, err.Error())
		c.recycle(r)
		return
	}
	var wrong string
	if r.get != nil {
		wrong = c.misdirected(len(r.get.GetResource()), func(k int) string { return r.get.GetResource()[k].GetResourceId() })
	} else {
		wrong = c.misdirected(len(r.rel.GetResourceId()), func(k int) string { return r.rel.GetResourceId()[k] })
	}
	if wrong != "" {
		c.refuseMisdirected(m, enc, wrong)
		c.recycle(r)
		return
	}
	c.enqueue(r)
}

// newRequest takes a request object for it: the one kept with the
// intake's request object if it has one (see recycle), else one from the
// pool. Either keeps the decoded messages of a request already answered,
// so that a refresh decodes into messages the previous one left,
// allocating little beyond its strings.
func (c *Coordinator) newRequest(it bulkItem) *request {
	lr, _ := it.m.(*leader.Request)
	var r *request
	if lr != nil {
		r, _ = lr.Kept().(*request)
	}
	if r == nil {
		r, _ = c.requests.Get().(*request)
		if r == nil {
			r = &request{}
		}
		if lr != nil {
			lr.Keep(r)
		}
	}
	r.kind, r.enc, r.msg, r.who = it.kind, it.enc, it.m, it.who
	return r
}

// recycle gives r back once it is answered or dropped, with the intake's
// request object it is kept with (leader.Release), else to the pool;
// nothing may refer to r or the messages it holds after that.
func (c *Coordinator) recycle(r *request) {
	m := r.msg
	slots := r.slotBuf
	if r.slots != nil {
		slots = r.slots
	}
	clear(slots) // they point into the ledger's resources
	if cap(slots) > maxKeptSlots {
		slots = nil
	}
	*r = request{getBuf: r.getBuf, relBuf: r.relBuf, slotBuf: slots[:0]}
	// Released, m may serve another request on another goroutine at
	// once, and r with it: r is reset before.
	if lr, ok := m.(*leader.Request); ok && lr.Kept() == r {
		leader.Release(lr)
		return
	}
	leader.Release(m)
	c.requests.Put(r)
}

// maxKeptSlots bounds the slots a recycled request keeps: a request of
// many resources is rare, its slots are not worth keeping.
const maxKeptSlots = 16

// sameClient checks that a request whose Allot-Client header claims a
// holder's place in the intake speaks for that client.
func sameClient(m micro.Request, r *request) error {
	h := clientOf(m)
	id := r.get.GetClientId()
	if r.rel != nil {
		id = r.rel.GetClientId()
	}
	if h != "" && h != id {
		return fmt.Errorf("header %s %q names another client than client_id %q", leader.HeaderClient, h, id)
	}
	return nil
}

// encodingOf is the encoding m declares in its Content-Type, as the
// intake read it.
func encodingOf(m micro.Request) wire.Encoding {
	if lr, ok := m.(*leader.Request); ok {
		return wire.EncodingOfType(lr.ContentType())
	}
	return wire.EncodingOf(m.Headers())
}

// clientOf is the client m's HeaderClient names, as the intake read it.
func clientOf(m micro.Request) string {
	if lr, ok := m.(*leader.Request); ok {
		return lr.Client()
	}
	return nats.Header(m.Headers()).Get(leader.HeaderClient)
}

// bulkLane decodes large requests on a goroutine of its own, in order.
type bulkLane struct {
	c      *Coordinator
	queue  chan bulkItem
	queued atomic.Int32 // submitted and not yet queued for a round
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

type bulkItem struct {
	m    micro.Request
	kind reqKind
	enc  wire.Encoding
	who  ledger.Claimant
}

// bulkQueue bounds the large requests waiting to be decoded.
const bulkQueue = 32

func newBulkLane(c *Coordinator) *bulkLane {
	b := &bulkLane{c: c, queue: make(chan bulkItem, bulkQueue), done: make(chan struct{})}
	b.wg.Add(1)
	go b.run()
	return b
}

func (b *bulkLane) run() {
	defer b.wg.Done()
	for {
		select {
		case it := <-b.queue:
			b.c.decode(it)
			b.queued.Add(-1)
		case <-b.done:
			return
		}
	}
}

func (b *bulkLane) busy() bool { return b.queued.Load() > 0 }

func (b *bulkLane) submit(it bulkItem) bool {
	b.queued.Add(1)
	select {
	case b.queue <- it:
		return true
	default:
		b.queued.Add(-1)
		return false
	}
}

// close ends the lane and decodes what it had queued.
func (b *bulkLane) close() {
	if b == nil {
		return
	}
	b.once.Do(func() {
		close(b.done)
		b.wg.Wait()
		for {
			select {
			case it := <-b.queue:
				b.c.decode(it)
				b.queued.Add(-1)
			default:
				return
			}
		}
	})
}

// handleServerGet serves allot.<node>.server.get and
// allot.<node>.server.get.<child>: a child node asking for capacity on
// behalf of its clients (see internal/ledger/tree.go).
func (c *Coordinator) handleServerGet(m micro.Request) {
	c.countCall(m.Subject(), 0)
	enc := encodingOf(m)
	r := &request{kind: kindServer, enc: enc, msg: m, srv: &allotpb.GetServerCapacityRequest{}}
	if err := decode(enc, m, r.srv, func() error { return wire.ValidateGetServerCapacity(r.srv) }); err != nil {
		c.replyError(m, enc, CodeBadRequest, err.Error())
		return
	}
	// On allot.<node>.server.get.<child> the subject names the child, and
	// NATS permissions may allow a child's link that subject alone: the
	// request must then speak for that child only.
	if child, ok := strings.CutPrefix(m.Subject(), c.leaseSubject("server.get")+"."); ok && r.srv.GetServerId() != child {
		c.replyError(m, enc, CodeBadRequest, "server_id "+strconv.Quote(r.srv.GetServerId())+" does not match the child "+
			strconv.Quote(child)+" the subject names: a child node asks for itself only")
		return
	}
	if wrong := c.misdirected(len(r.srv.GetResource()), func(k int) string { return r.srv.GetResource()[k].GetResourceId() }); wrong != "" {
		c.refuseMisdirected(m, enc, wrong)
		return
	}
	c.enqueue(r)
}

func decode(enc wire.Encoding, m micro.Request, msg proto.Message, validate func() error) error {
	if err := wire.Unmarshal(enc, m.Data(), msg); err != nil {
		return err
	}
	return validate()
}

// replyError answers, from the handler's own goroutine, with the micro
// error headers and an ErrorReply body in the request's encoding, and
// finishes the request in the intake; countCall counts it.
func (c *Coordinator) replyError(m micro.Request, enc wire.Encoding, code int, text string) {
	defer leader.Finish(m)
	c.countCall(m.Subject(), code)
	if !c.gate.Open() {
		c.gate.Silenced.Add(1)
		return
	}
	if err := reply.Error(m, enc, code, text); err != nil {
		c.log.Debug("error reply failed", "err", err)
	}
}

// The round loop answers requests after their micro handler has returned.
// It publishes the replies itself instead of calling micro.Request's
// Respond or Error: those record their outcome in the request for the
// handler's bookkeeping, which races with micro's handler goroutine once
// the handler has returned (nats.go micro, request.respondError).

// roundError answers a queued request with an error, like replyError.
func (c *Coordinator) roundError(m micro.Request, enc wire.Encoding, code int, text string) {
	c.stats.errors++
	c.countCall(m.Subject(), code)
	c.publish(m, reply.ErrorMsg(m.Reply(), enc, code, text))
}

// reply answers with msg in the request's encoding (see reply.Msg).
func (c *Coordinator) reply(m micro.Request, enc wire.Encoding, msg proto.Message) {
	out, err := reply.Marshal(m.Reply(), enc, msg)
	if err != nil {
		c.roundError(m, enc, CodeInternal, err.Error())
		return
	}
	c.publish(m, out)
}

// publish sends a reply to m's reply subject, unless this coordinator may
// no longer answer (see leader.Gate), and finishes m in the intake: every
// request is finished here or in replyError.
func (c *Coordinator) publish(m micro.Request, out *nats.Msg) {
	defer leader.Finish(m)
	if m.Reply() == "" {
		return // a publish, not a request: nobody to answer
	}
	if !c.gate.Open() {
		c.gate.Silenced.Add(1)
		return
	}
	c.partitionsHeader(out)
	var err error
	if lr, ok := m.(*leader.Request); ok {
		err = lr.RespondMsg(out) // on the connection it came on
	} else {
		err = c.nc.PublishMsg(out)
	}
	if err != nil {
		c.log.Debug("reply failed", "err", err)
	}
}
