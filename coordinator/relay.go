package coordinator

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/reply"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// relayTimeout bounds how long partition 0 waits for the partitions'
// answers to a relayed request (less if the request's Allot-Timeout says
// so).
const relayTimeout = 2 * time.Second

// handleRelay serves, on partition 0 of a node with lease partitions, the
// node's plain subjects (allot.<node>.capacity.{get,refresh,release},
// allot.<node>.server.get[.<child>] and the tenants' capacity subjects):
// a request names resources of any partition, so it is split, each part
// is asked of its owner's subject and the answers are merged, in request
// order. Clients that know the partitions (the agent, a child node) send
// each its own resources and never pass here; this keeps `nats req` and
// JSON clients working. The answer says how many partitions there are
// (Allot-Lease-Partitions). Nothing is decided here: each partition
// validates and grants its own part.
func (c *Coordinator) handleRelay(m micro.Request) {
	c.countCall(m.Subject(), 0)
	subj := m.Subject()
	tenant := subjects.TenantOf(subj)
	endpoint := strings.TrimPrefix(subjects.Untenant(subj), subjects.Coordinator(c.opts.Node, ""))
	hdr := nats.Header{}
	for k, v := range m.Headers() {
		hdr[k] = append([]string(nil), v...)
	}
	hdr.Set(wire.HeaderContentType, wire.ContentProtobuf)
	enc := encodingOf(m)
	timeout := relayTimeout
	if ms, err := strconv.ParseInt(hdr.Get(wire.HeaderTimeout), 10, 64); err == nil && ms > 0 {
		timeout = min(timeout, time.Duration(ms)*time.Millisecond)
	}
	r := relayed{c: c, m: m, enc: enc, hdr: hdr, timeout: timeout,
		subject: func(p int) string {
			s := subjects.LeaseSubject(c.opts.Node, endpoint, p, c.opts.Partitions)
			if tenant != "" {
				s = subjects.Tenant(tenant, s)
			}
			return s
		}}
	switch {
	case endpoint == "capacity.get" || endpoint == "capacity.refresh":
		go r.get()
	case endpoint == "capacity.release":
		go r.release()
	case endpoint == "server.get" || strings.HasPrefix(endpoint, "server.get."):
		go r.serverGet()
	default:
		r.fail(CodeUnknownEndpoint, "unknown operation "+strconv.Quote(endpoint)+": use capacity.get, capacity.refresh or capacity.release")
	}
}

// relayed is one request being relayed.
type relayed struct {
	c       *Coordinator
	m       micro.Request
	enc     wire.Encoding
	hdr     nats.Header
	timeout time.Duration
	subject func(p int) string
}

// outcome is one partition's answer: resp, or an error code and text.
type outcome struct {
	resp proto.Message
	code int
	text string
}

// split splits items by the partition owning each: the positions of
// each partition's in the request, and its part of the request, which
// request makes of them.
func split[T any](r relayed, items []T, id func(T) string, request func([]T) proto.Message) (map[int][]int, map[int]proto.Message) {
	groups := map[int][]int{}
	for k, x := range items {
		p := subjects.LeasePartition(id(x), r.c.opts.Partitions)
		groups[p] = append(groups[p], k)
	}
	parts := make(map[int]proto.Message, len(groups))
	for p, idx := range groups {
		own := make([]T, len(idx))
		for j, k := range idx {
			own[j] = items[k]
		}
		parts[p] = request(own)
	}
	return groups, parts
}

// ask sends each partition its part (parts[p]) at once and waits for all
// answers, decoded into what newResp makes.
func (r relayed) ask(parts map[int]proto.Message, newResp func() proto.Message) map[int]outcome {
	out := make(map[int]outcome, len(parts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p, part := range parts {
		wg.Go(func() {
			o := r.askOne(p, part, newResp())
			mu.Lock()
			out[p] = o
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func (r relayed) askOne(p int, part, resp proto.Message) outcome {
	data, err := wire.Marshal(wire.Protobuf, part)
	if err != nil {
		return outcome{code: CodeInternal, text: err.Error()}
	}
	msg, err := r.c.nc.RequestMsg(&nats.Msg{Subject: r.subject(p), Header: r.hdr, Data: data}, r.timeout)
	if err != nil {
		return outcome{code: CodeUnavailable, text: "lease partition " + strconv.Itoa(p) + " did not answer: " + err.Error()}
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return outcome{code: n, text: "lease partition " + strconv.Itoa(p) + ": " + msg.Header.Get(micro.ErrorHeader)}
	}
	if err := wire.Unmarshal(wire.ReplyEncodingOf(msg.Header), msg.Data, resp); err != nil {
		return outcome{code: CodeInternal, text: "lease partition " + strconv.Itoa(p) + ": bad answer: " + err.Error()}
	}
	return outcome{resp: resp}
}

// fail answers with an error reply.
func (r relayed) fail(code int, text string) {
	r.c.countCall(r.m.Subject(), code)
	r.c.publish(r.m, reply.ErrorMsg(r.m.Reply(), r.enc, code, text))
}

// answer answers with msg in the request's encoding.
func (r relayed) answer(msg proto.Message) {
	out, err := reply.Marshal(r.m.Reply(), r.enc, msg)
	if err != nil {
		r.fail(CodeInternal, err.Error())
		return
	}
	r.c.publish(r.m, out)
}

// allFailed returns the first failure when every part failed.
func allFailed(outs map[int]outcome) (outcome, bool) {
	var first outcome
	for _, o := range outs {
		if o.code == 0 {
			return outcome{}, false
		}
		if first.code == 0 {
			first = o
		}
	}
	return first, true
}

func (r relayed) get() {
	var req allotpb.GetCapacityRequest
	if err := wire.DecodeGetCapacity(r.enc, r.m.Data(), &req); err != nil {
		r.fail(CodeBadRequest, err.Error())
		return
	}
	rs := req.GetResource()
	groups, parts := split(r, rs, (*allotpb.ResourceRequest).GetResourceId, func(own []*allotpb.ResourceRequest) proto.Message {
		return &allotpb.GetCapacityRequest{ClientId: req.GetClientId(), Resource: own}
	})
	outs := r.ask(parts, func() proto.Message { return &allotpb.GetCapacityResponse{} })
	if o, all := allFailed(outs); all {
		r.fail(o.code, o.text)
		return
	}
	resp := &allotpb.GetCapacityResponse{Response: make([]*allotpb.ResourceResponse, len(rs))}
	for p, idx := range groups {
		o := outs[p]
		var got []*allotpb.ResourceResponse
		if o.code == 0 {
			pr := o.resp.(*allotpb.GetCapacityResponse)
			resp.Term = max(resp.Term, pr.GetTerm())
			got = pr.GetResponse()
			if len(got) != len(idx) {
				o = outcome{code: CodeInternal, text: "lease partition " + strconv.Itoa(p) + " answered " + strconv.Itoa(len(got)) + " resources of " + strconv.Itoa(len(idx))}
			}
		}
		for j, k := range idx {
			if o.code != 0 {
				resp.Response[k] = &allotpb.ResourceResponse{ResourceId: rs[k].GetResourceId(), Error: o.text, ErrorCode: int32(o.code)}
				continue
			}
			resp.Response[k] = got[j]
		}
	}
	r.answer(resp)
}

func (r relayed) release() {
	var req allotpb.ReleaseCapacityRequest
	if err := wire.DecodeRelease(r.enc, r.m.Data(), &req); err != nil {
		r.fail(CodeBadRequest, err.Error())
		return
	}
	_, parts := split(r, req.GetResourceId(), func(id string) string { return id }, func(own []string) proto.Message {
		return &allotpb.ReleaseCapacityRequest{ClientId: req.GetClientId(), ResourceId: own}
	})
	outs := r.ask(parts, func() proto.Message { return &allotpb.ReleaseCapacityResponse{} })
	resp := &allotpb.ReleaseCapacityResponse{}
	for _, o := range outs {
		if o.code != 0 {
			// What the other partitions released stays released; those of
			// this one run to their expiry.
			r.fail(o.code, o.text)
			return
		}
		pr := o.resp.(*allotpb.ReleaseCapacityResponse)
		resp.Released += pr.GetReleased()
		resp.Term = max(resp.Term, pr.GetTerm())
	}
	r.answer(resp)
}

// serverGet relays a child node's ask. A partition that does not answer
// leaves its resources out of the answer: the child keeps what it holds
// of them until it expires, as when the parent cannot be reached.
func (r relayed) serverGet() {
	var req allotpb.GetServerCapacityRequest
	if err := wire.Unmarshal(r.enc, r.m.Data(), &req); err != nil {
		r.fail(CodeBadRequest, err.Error())
		return
	}
	_, parts := split(r, req.GetResource(), (*allotpb.ServerCapacityResourceRequest).GetResourceId,
		func(own []*allotpb.ServerCapacityResourceRequest) proto.Message {
			return &allotpb.GetServerCapacityRequest{ServerId: req.GetServerId(), Resource: own}
		})
	outs := r.ask(parts, func() proto.Message { return &allotpb.GetServerCapacityResponse{} })
	if o, all := allFailed(outs); all {
		r.fail(o.code, o.text)
		return
	}
	resp := &allotpb.GetServerCapacityResponse{}
	for _, o := range outs {
		if o.code == 0 {
			pr := o.resp.(*allotpb.GetServerCapacityResponse)
			resp.Term = max(resp.Term, pr.GetTerm())
			resp.Response = append(resp.Response, pr.GetResponse()...)
		}
	}
	r.answer(resp)
}
