package domainserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/sources"
)

// call is the scratch of one request: its decoded body, its reply and
// the reply's encoding. Calls are recycled through Server.calls once the
// reply is sent, so that a request or reserve allocates nothing beside
// the hold it makes.
type call struct {
	request domainwire.Request
	reserve domainwire.Reserve
	release domainwire.Release
	rate    domainwire.RateReply
	copies  domainwire.ReserveReply
	share   domainwire.Share
	// sealed is a granted reserve's hold id (idLen bytes) and seal,
	// written into idSeal: its reply is written with them, and no strings
	// are made of them. nil for any other reply.
	sealed []byte
	idLen  int
	idSeal [20 + maxSealLen]byte
	buf    []byte
	msg    nats.Msg
}

// maxCallBuf bounds the reply buffer a recycled call keeps.
const maxCallBuf = 16 << 10

// handle serves every domain subject of the partition.
func (s *Server) handle(m micro.Request) {
	// The endpoints are Deferred only so that the request object goes
	// back to the intake's pool once answered: every request is answered
	// (or dropped) before handle returns.
	defer leader.Release(m)
	tenant, op, ns, name, err := domainwire.ParseTenantSubject(m.Subject())
	if err != nil {
		s.replyError(m, domainwire.CodeBadRequest, err.Error())
		return
	}
	if tenant != "" {
		if nsc := sources.CurrentDomains(s.opts.Config)[ns]; nsc != nil && len(nsc.Tenants) > 0 && !slices.Contains(nsc.Tenants, tenant) {
			s.replyError(m, domainwire.CodeForbidden, fmt.Sprintf("namespace %q is not open to tenant %q (its tenants are %q)", ns, tenant, nsc.Tenants))
			return
		}
	}
	c, _ := s.calls.Get().(*call)
	if c == nil {
		c = &call{}
	}
	defer s.recycle(c)
	var out any
	switch op {
	case domainwire.OpRequest:
		out, err = s.request(m.Data(), ns, name, c)
	case domainwire.OpReserve:
		out, err = s.reserve(m.Data(), ns, name, c)
	case domainwire.OpRelease:
		out, err = s.release(m.Data(), ns, name, c)
	case domainwire.OpRefresh:
		out, err = s.refresh(m.Data(), ns, name)
	case domainwire.OpTransfer:
		out, err = s.transfer(m.Data(), ns, name)
	case domainwire.OpSeize:
		out, err = s.seize(m.Data(), ns, name)
	default:
		err = &opError{domainwire.CodeBadRequest, fmt.Sprintf("unknown operation %q: use one of %v", op, domainwire.Ops)}
	}
	if err != nil {
		var oe *opError
		if !errors.As(err, &oe) {
			oe = classify(err)
		}
		s.replyError(m, oe.code, oe.text)
		return
	}
	var b []byte
	switch r := out.(type) {
	case *domainwire.RateReply:
		b = domainwire.AppendRateReply(c.buf[:0], r)
		c.buf = b
	case *domainwire.ReserveReply:
		if r == &c.copies && c.sealed != nil {
			b = domainwire.AppendReserveReplySealed(c.buf[:0], r, c.sealed[:c.idLen], c.sealed[c.idLen:])
		} else {
			b = domainwire.AppendReserveReply(c.buf[:0], r)
		}
		c.buf = b
	case *domainwire.RefreshReply:
		b, err = s.refreshBody(r)
	default:
		b, err = json.Marshal(out)
	}
	if err != nil {
		s.replyError(m, domainwire.CodeInternal, "encode reply: "+err.Error())
		return
	}
	if !s.mayAnswer() {
		s.gate.Silenced.Add(1)
		return
	}
	if r, ok := m.(*leader.Request); ok {
		// The intake's request sends a message it is given: the call's,
		// which the connection has copied out once RespondMsg returns.
		c.msg = nats.Msg{Data: b}
		err = r.RespondMsg(&c.msg)
	} else {
		err = m.Respond(b)
	}
	if err != nil {
		s.log.Debug("reply", "subject", m.Subject(), "err", err)
	}
}

// recycle returns c to the pool once its reply is sent: nothing may refer
// to c, its messages or its buffer after that.
func (s *Server) recycle(c *call) {
	buf := c.buf[:0]
	if cap(buf) > maxCallBuf {
		buf = nil
	}
	gh, sg := c.copies.GroupHolds[:0], c.share.Groups[:0]
	*c = call{buf: buf}
	c.copies.GroupHolds, c.share.Groups = gh, sg
	s.calls.Put(c)
}

// decoded decodes a request body with decode and validates it.
func decoded[T any, P interface {
	*T
	Validate() error
}](data []byte, decode func([]byte, *T) error) (*T, error) {
	v := new(T)
	if err := decode(data, v); err != nil {
		return nil, err
	}
	if err := P(v).Validate(); err != nil {
		return nil, err
	}
	return v, nil
}

// strict is domainwire.Decode for one type: the decoder of the bodies
// without a fast path.
func strict[T any](data []byte, v *T) error { return domainwire.Decode(data, v) }

// opError is an error reply: a code of domainwire and a sentence.
type opError struct {
	code int
	text string
}

func (e *opError) Error() string { return e.text }

func errorf(code int, format string, args ...any) error {
	return &opError{code, fmt.Sprintf(format, args...)}
}

// classify maps an error of validation or of the decision core to its
// reply code.
func classify(err error) *opError {
	code := domainwire.CodeInternal
	switch {
	case errors.Is(err, domainwire.ErrBadRequest), errors.Is(err, domainlimit.ErrInvalid):
		code = domainwire.CodeBadRequest
	case errors.Is(err, errNoConfig), errors.Is(err, domainlimit.ErrUnknownResource):
		code = domainwire.CodeNotFound
	case errors.Is(err, domainlimit.ErrWrongKind), errors.Is(err, domainlimit.ErrNotHeld):
		code = domainwire.CodeConflict
	}
	return &opError{code, err.Error()}
}

func (s *Server) replyError(m micro.Request, code int, text string) {
	s.mu.Lock()
	s.counts.Errors++
	s.mu.Unlock()
	if !s.mayAnswer() {
		s.gate.Silenced.Add(1)
		return
	}
	body, _ := json.Marshal(domainwire.ErrorReply{Code: code, Error: text})
	if err := m.Error(strconv.Itoa(code), text, body); err != nil {
		s.log.Debug("error reply", "subject", m.Subject(), "err", err)
	}
}

// request applies hits to a rate-limited resource. Its reply is c's.
func (s *Server) request(data []byte, ns, name string, c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := &c.request
	if err := domainwire.DecodeRequestNames(data, in, s.names); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	now := s.opts.Now()
	r, err := s.resolve(ns, name, domainlimit.KindRate)
	if err != nil {
		return nil, err
	}
	res, err := r.rate.Request(s.nanos(now), in.Domain, in.Copies, in.MinCopies)
	if err != nil {
		return nil, err
	}
	s.counts.Requests++
	if res.Granted == 0 {
		s.counts.Rejected++
	}
	s.counts.HitsGranted += uint64(res.Granted)
	c.rate = domainwire.RateReply{Granted: res.Granted, HardLimit: domainwire.Limit(res.HardLimit), GlobalLimit: domainwire.Limit(res.GlobalLimit),
		TierLimit: domainwire.Limit(res.TierLimit), DomainHitsLastSecond: res.DomainLastSecond, GlobalHitsLastSecond: res.GlobalLastSecond,
		TierHits: res.TierHits, Tier: res.Tier, Burst: res.Burst, HardLimited: res.HardLimited, GlobalLimited: res.GlobalLimited,
		Ignored: r.permissive && !r.unconfigured, Unconfigured: r.unconfigured, Fail: r.src.Fail.String()}
	return &c.rate, nil
}

// share tells clientID its share of r's limits for domain, seeing it
// there: what it may have while no service answers. A learning leader
// tells none (nil), as its counts are not complete yet, but sees the
// client all the same. Called with s.mu held.
func (s *Server) share(r *resource, clientID, domain string, now time.Time) *domainwire.Share {
	sh := r.holders.Share(r.copies, clientID, domain, s.nanos(now))
	return s.shareInto(&domainwire.Share{}, sh, now)
}

// shareInto is sh written into out, whose Groups it reuses; it returns
// out, or nil while learning. Called with s.mu held.
func (s *Server) shareInto(out *domainwire.Share, sh domainlimit.Share, now time.Time) *domainwire.Share {
	if learning, _ := s.learning(now); learning {
		return nil
	}
	groups := out.Groups[:0]
	for _, g := range sh.Groups {
		groups = append(groups, domainwire.GroupShare{Name: g.Name, Share: domainwire.Limit(g.Share)})
	}
	if len(groups) == 0 {
		groups = nil // left out of the reply
	}
	*out = domainwire.Share{Domain: domainwire.Limit(sh.Domain), Global: domainwire.Limit(sh.Global), Groups: groups}
	return out
}

// copyReply fills out with the context data of a reserve or seize reply,
// reusing its GroupHolds.
func (s *Server) copyReply(out *domainwire.ReserveReply, res domainlimit.CopyResult, r *resource) {
	gh := out.GroupHolds[:0]
	if gh == nil {
		gh = []domainwire.GroupHolds{} // an empty list, not null
	}
	for _, g := range res.Groups {
		gh = append(gh, domainwire.GroupHolds{Name: g.Name, Limit: domainwire.Limit(g.Limit), Holds: g.Holds})
	}
	*out = domainwire.ReserveReply{Granted: res.Granted, DomainLimit: domainwire.Limit(res.DomainLimit), GlobalLimit: domainwire.Limit(res.GlobalLimit),
		DomainHolds: res.DomainHolds, GlobalHolds: res.GlobalHolds, Groups: res.GroupNames(), GroupHolds: gh,
		TTLMillis: s.opts.HoldTTL.Milliseconds(), Ignored: r.permissive && !r.unconfigured, Unconfigured: r.unconfigured, Fail: r.src.Fail.String()}
}

// reserve takes a hold of a copy-limited resource. Its reply is c's.
func (s *Server) reserve(data []byte, ns, name string, c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := &c.reserve
	if err := domainwire.DecodeReserveNames(data, in, s.names); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	now := s.opts.Now()
	s.expireTransfers(now)
	r, err := s.resolve(ns, name, domainlimit.KindCopies)
	if err != nil {
		return nil, err
	}
	s.counts.Reserves++
	if learning, left := s.learning(now); learning {
		// Holds granted by the previous leader are still being heard of:
		// granting now could exceed a limit.
		s.counts.LearningRefusals++
		return &domainwire.ReserveReply{Groups: []string{}, GroupHolds: []domainwire.GroupHolds{}, DomainLimit: domainwire.Limit(r.copies.DomainLimit(in.Domain)),
			GlobalLimit: domainwire.Limit(r.copies.Spec().GlobalLimit), DomainHolds: r.copies.Holds(in.Domain), GlobalHolds: r.copies.Global(),
			TTLMillis: s.opts.HoldTTL.Milliseconds(), Learning: true, RetryAfterMillis: max(1, left.Milliseconds()),
			Fail: r.src.Fail.String(), Share: s.share(r, in.ClientID, in.Domain, now)}, nil
	}
	res, err := r.copies.Reserve(in.Domain, in.Copies, in.MinCopies)
	if err != nil {
		return nil, err
	}
	out := &c.copies
	s.copyReply(out, res, r)
	var sh domainlimit.Share
	if res.Granted == 0 {
		s.counts.ReservesRefused++
		sh = r.holders.Share(r.copies, in.ClientID, in.Domain, s.nanos(now))
	} else {
		// The share counts the copies just granted as the client's.
		h := s.fileHold("", in.ClientID, r, in.Domain, out.Groups, res.Granted, now) // gives it its id
		sh = r.holders.AddShare(r.copies, in.ClientID, in.Domain, out.Groups, res.Granted, s.nanos(now))
		s.counts.CopiesGranted += uint64(res.Granted)
		// The reply's id and seal are written into c (handle sends them).
		b := s.holds.appendID(c.idSeal[:0], h)
		c.idLen = len(b)
		c.sealed = s.appendSeal(b, string(b), s.holds.key(h), h.copies, now)
	}
	out.Share = s.shareInto(&c.share, sh, now)
	return out, nil
}

// ownHold returns the hold id of client on ns/name, or an error saying
// why not. Called with s.mu held.
func (s *Server) ownHold(id, clientID, ns, name string) (*hold, error) {
	h := s.holds.get(id)
	if h == nil {
		return nil, errorf(domainwire.CodeNotFound, "hold %q is not held: it was released, or it expired because its client stopped refreshing it", id)
	}
	switch k := s.holds.key(h); {
	case k.res.ns != ns || k.res.name != name:
		return nil, errorf(domainwire.CodeNotFound, "hold %q is a hold of %s:%s, not of %s:%s", id, k.res.ns, k.res.name, ns, name)
	case k.clientID != clientID:
		return nil, errorf(domainwire.CodeForbidden, "hold %q belongs to another client", id)
	}
	return h, nil
}

// learntHold is ownHold for a release or transfer of part of a hold.
// While learning, a hold not heard of yet may well be alive: its count is
// unknown, so the operation is refused as unavailable (the agent applies
// a release locally and its next refresh carries the lower count; a
// transfer is retried) rather than as not held, which would make the
// client drop copies it still holds. Called with s.mu held.
func (s *Server) learntHold(id, clientID, ns, name, op string) (*hold, error) {
	if s.holds.get(id) == nil {
		if learning, left := s.learning(s.opts.Now()); learning {
			return nil, errorf(domainwire.CodeUnavailable, "%s of hold %q: this leader took over recently and has not heard of the hold yet "+
				"(it learns the live holds from their refreshes for another %v); retry after the hold's next refresh", op, id, left.Round(time.Millisecond))
		}
	}
	return s.ownHold(id, clientID, ns, name)
}

// release gives copies of a hold back.
func (s *Server) release(data []byte, ns, name string, c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := &c.release
	if err := domainwire.DecodeRelease(data, in, s.names); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	s.expireTransfers(s.opts.Now())
	if s.holds.get(in.HoldID) == nil && in.Copies == 0 {
		if learning, _ := s.learning(s.opts.Now()); learning {
			// Not heard of yet: the client gives it all up before this
			// leader learnt it, and may not list it in a refresh again.
			if len(s.ended) >= maxEnded {
				return nil, errorf(domainwire.CodeUnavailable, "release of hold %q: this leader took over recently and has not heard of the hold; retry after it has learnt the holds", in.HoldID)
			}
			s.ended[endedKey(ns, name, in.ClientID, in.HoldID)] = struct{}{}
			if t := s.seized[in.HoldID]; t != nil && t.seizedBy == in.ClientID {
				if tns, tname, _ := domainwire.TransferResource(t.id); tns == ns && tname == name {
					s.dropSeizeRecord(in.HoldID)
				}
			}
			s.counts.Releases++
			return domainwire.ReleaseReply{}, nil
		}
	}
	h, err := s.learntHold(in.HoldID, in.ClientID, ns, name, "release")
	if err != nil {
		return nil, err
	}
	n := in.Copies
	if n == 0 {
		n = h.copies
	}
	if n > h.copies {
		return nil, errorf(domainwire.CodeConflict, "release of %d copies: hold %q has %d", n, in.HoldID, h.copies)
	}
	if err := s.dropHold(h, n); err != nil {
		return nil, err
	}
	s.counts.Releases++
	return domainwire.ReleaseReply{Remaining: h.copies}, nil
}

// refresh keeps a client's holds alive; while learning it adopts the
// holds it has not heard of.
func (s *Server) refresh(data []byte, ns, name string) (any, error) {
	// Decoded before the lock (a refresh may list many holds), so
	// without the server's kept names.
	in := new(domainwire.Refresh)
	if err := domainwire.DecodeRefresh(data, in, nil); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Read under the lock: the sweeper clears s.ended once learning ends.
	now := s.opts.Now()
	s.expireTransfers(now)
	learning, _ := s.learning(now)
	out := domainwire.RefreshReply{TTLMillis: s.opts.HoldTTL.Milliseconds(), Lost: []string{}}
	var domains []string // of the holds kept, for their shares
	for _, l := range in.Holds {
		h := s.holds.get(l.HoldID)
		switch {
		case h == nil && learning:
			// A hold listed with more copies than its seal covers (a
			// transfer whose reply was lost) is adopted with the seal's.
			sealed, err := s.checkSeal(&l, in.ClientID, ns, name, now)
			if _, gone := s.ended[endedKey(ns, name, in.ClientID, l.HoldID)]; gone && err == nil {
				err = errors.New("the hold was released, transferred or expired at this leader")
			}
			copies := min(l.Copies, sealed)
			var r *resource
			if err == nil {
				r, err = s.resolve(ns, name, domainlimit.KindCopies)
			}
			// A seal vouches that the hold was granted, not that it is
			// still held: a client could list holds it has given back to
			// the old leader. Adopted holds never exceed the limits.
			// What does not fit is not adopted (a hold whose transfer
			// reply was lost lists copies a restored transfer counts).
			if err == nil {
				if copies = min(copies, r.copies.Room(l.Domain, l.Groups)); copies < 1 {
					err = errors.New("no room left for it in the limits")
				}
			}
			if err == nil {
				err = r.copies.Restore(l.Domain, l.Groups, copies)
			}
			if err != nil {
				s.log.Warn("cannot adopt a hold from a refresh", "hold", l.HoldID, "client_id", in.ClientID, "err", err)
				if errors.Is(err, errSeal) {
					s.counts.Unsealed++
				}
				out.Lost = append(out.Lost, l.HoldID)
				continue
			}
			h = s.addHold(l.HoldID, in.ClientID, r, l.Domain, l.Groups, copies, now)
			s.counts.Restored++
		case h == nil || s.holds.key(h).clientID != in.ClientID || s.holds.key(h).res.ns != ns || s.holds.key(h).res.name != name:
			out.Lost = append(out.Lost, l.HoldID)
			continue
		default:
			s.touchHold(h, now)
			k := s.holds.key(h)
			k.res.holders.Touch(in.ClientID, k.domain, k.groups, s.nanos(now))
			// The client gave copies back that this server did not hear
			// of (a release whose reply was lost): its count is the truth.
			if l.Copies < h.copies {
				if err := s.dropHold(h, h.copies-l.Copies); err != nil {
					s.log.Error("reconciling a hold with its refresh", "hold", l.HoldID, "err", err)
				}
			}
		}
		if h.copies > 0 {
			if out.Seals == nil {
				out.Seals = make(map[string]string, len(in.Holds))
			}
			k := s.holds.key(h)
			out.Seals[l.HoldID] = s.seal(l.HoldID, k, h.copies, now)
			domains = append(domains, k.domain)
		}
	}
	s.refreshShares(&out, in.ClientID, ns, name, domains, now)
	s.counts.Refreshes++
	s.counts.Lost += uint64(len(out.Lost))
	return &out, nil
}

// refreshBody encodes a refresh reply. One that would not fit in a NATS
// message goes without its shares: a refresh must reach its client (its
// holds depend on it), which keeps the shares it had; the agent sizes its
// refreshes so that this does not happen.
func (s *Server) refreshBody(r *domainwire.RefreshReply) ([]byte, error) {
	b, err := json.Marshal(r)
	if err == nil && r.Shares != nil && int64(len(b)) > s.nc.MaxPayload()-replySlack {
		s.log.Warn("a refresh reply is too large for its shares; sent without them", "bytes", len(b), "domains", len(r.Shares))
		r.Shares = nil
		b, err = json.Marshal(r)
	}
	return b, err
}

// replySlack is room left in a reply for what NATS adds to the payload
// it counts against max_payload (the micro service's headers).
const replySlack = 1024

// refreshShares tells a refreshing client the namespace's fail mode and
// its share of each domain it still holds copies of: a holder learns its
// share anew every refresh, as the others' holds and the clients seen
// change. Called with s.mu held.
func (s *Server) refreshShares(out *domainwire.RefreshReply, clientID, ns, name string, domains []string, now time.Time) {
	if len(domains) == 0 {
		return
	}
	r, err := s.resolve(ns, name, domainlimit.KindCopies)
	if err != nil {
		return // no configuration for the resource any more: nothing to tell
	}
	out.Fail = r.src.Fail.String()
	for _, d := range domains {
		if _, done := out.Shares[d]; done {
			continue
		}
		sh := s.share(r, clientID, d, now)
		if sh == nil {
			return // learning
		}
		if out.Shares == nil {
			out.Shares = make(map[string]domainwire.Share)
		}
		out.Shares[d] = *sh
	}
}

// transfer stages copies of a hold for another process to seize.
func (s *Server) transfer(data []byte, ns, name string) (any, error) {
	var in domainwire.Transfer
	if err := domainwire.Decode(data, &in); err != nil {
		return nil, err
	}
	ttl, err := in.Validate()
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireTransfers(now)
	h, err := s.learntHold(in.HoldID, in.ClientID, ns, name, "transfer")
	if err != nil {
		return nil, err
	}
	n := in.Copies
	if n == 0 {
		n = h.copies
	}
	if n > h.copies {
		return nil, errorf(domainwire.CodeConflict, "transfer of %d copies: hold %q has %d", n, in.HoldID, h.copies)
	}
	if len(s.transfers) >= MaxTransfers {
		return nil, errorf(domainwire.CodeTooMany, "%d transfers are staged or recently seized; the limit is %d", len(s.transfers), MaxTransfers)
	}
	full := ns + "." + name + "." + newID()
	k := s.holds.key(h)
	t := &transfer{id: full, res: k.res, domain: k.domain, groups: k.groups, copies: n, expires: now.Add(ttl)}
	// Written before the reply, so that a new leader still has it; if it
	// cannot be, the hold stays as it was. A hold made by a seize loses
	// its seize record: its holder has it (it transfers from it), and a
	// new leader must not make it again from the record beside the
	// copies moving on.
	s.stage(t)
	rec := s.seized[in.HoldID]
	if rec != nil {
		delete(s.transfers, rec.id)
	}
	if err := s.saveTransfers(); err != nil {
		delete(s.transfers, full)
		if rec != nil {
			s.stage(rec)
		}
		if errors.Is(err, errStateFull) {
			return nil, errorf(domainwire.CodeTooMany, "%v: seize staged transfers or let them expire (the hold is unchanged)", err)
		}
		return nil, errorf(domainwire.CodeInternal, "store the transfer in the state bucket: %v (the hold is unchanged)", err)
	}
	if rec != nil {
		delete(s.seized, in.HoldID)
	}
	// The copies stay counted in the core: they are held by the transfer,
	// no longer by the client.
	s.unhold(h, n)
	h.copies -= n
	if h.copies == 0 {
		s.forgetHold(h)
	}
	s.counts.Transfers++
	return domainwire.TransferReply{TransferID: full, Remaining: h.copies}, nil
}

// seize claims staged copies as a new hold of the seizer.
func (s *Server) seize(data []byte, ns, name string) (any, error) {
	in, err := decoded[domainwire.Seize](data, strict[domainwire.Seize])
	if err != nil {
		return nil, err
	}
	if tns, tname, err := domainwire.TransferResource(in.TransferID); err != nil {
		return nil, err
	} else if tns != ns || tname != name {
		return nil, errorf(domainwire.CodeBadRequest, "transfer %q is of %s:%s; send it to %s", in.TransferID, tns, tname,
			domainwire.Subject(s.opts.Node, domainwire.OpSeize, tns, tname))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now() // under the lock, as in refresh
	s.expireTransfers(now)
	t := s.transfers[in.TransferID]
	if t == nil || now.After(t.expires) {
		return nil, errorf(domainwire.CodeNotFound, "transfer %q does not exist or has expired", in.TransferID)
	}
	if !t.staged() {
		return s.reseize(t, in.ClientID, ns, name, now)
	}
	// The record stays one hold TTL, naming the new hold: a seizer whose
	// reply was lost asks again and gets the same hold.
	seized := *t
	seized.res, seized.seizedBy, seized.holdID, seized.expires = nil, in.ClientID, newID(), now.Add(s.opts.HoldTTL)
	s.stage(&seized)
	err = s.saveTransfers()
	if errors.Is(err, errStateFull) {
		// A seize must not fail for room: it then forgets the transfer
		// instead of keeping its record, and is not idempotent.
		delete(s.transfers, in.TransferID)
		err = s.saveTransfers()
	}
	if err != nil {
		// Seizing anyway would let a new leader restore the transfer
		// beside the new hold: count the copies twice.
		s.stage(t)
		return nil, errorf(domainwire.CodeInternal, "record the seize in the state bucket: %v (not seized; retry)", err)
	}
	if s.transfers[in.TransferID] != nil {
		s.seized[seized.holdID] = &seized
	}
	h := s.addHold(seized.holdID, in.ClientID, t.res, t.domain, t.groups, t.copies, now)
	s.counts.Seized++
	return s.seizeReply(h, now), nil
}

// reseize answers a seize of a transfer already seized: the seizer asking
// again (its reply was lost) gets its hold as it is now. A new leader
// that has not heard of that hold from a refresh while it learns makes it
// again from the record: the predecessor counted it, and nobody else
// could have been granted its copies since. Called with s.mu held.
func (s *Server) reseize(t *transfer, clientID, ns, name string, now time.Time) (any, error) {
	if t.seizedBy != clientID {
		return nil, errorf(domainwire.CodeConflict, "transfer %q was already seized by another client", t.id)
	}
	h := s.holds.get(t.holdID)
	if h == nil {
		learning, _ := s.learning(now)
		_, gone := s.ended[endedKey(ns, name, clientID, t.holdID)]
		if !learning || gone {
			return nil, errorf(domainwire.CodeNotFound, "transfer %q was seized by this client as hold %q, which has since been released or expired",
				t.id, t.holdID)
		}
		r, err := s.resolve(ns, name, domainlimit.KindCopies)
		if err == nil && r.copies.Room(t.domain, t.groups) < t.copies {
			// Holds adopted meanwhile took the room (a client listing
			// older seals): the limits come first.
			err = errorf(domainwire.CodeConflict, "transfer %q: its hold %q does not fit in the limits any more", t.id, t.holdID)
		}
		if err == nil {
			err = r.copies.Restore(t.domain, t.groups, t.copies)
		}
		if err != nil {
			return nil, err
		}
		h = s.addHold(t.holdID, clientID, r, t.domain, t.groups, t.copies, now)
	} else {
		s.touchHold(h, now)
	}
	// Not counted again: Seized counts transfers seized.
	return s.seizeReply(h, now), nil
}

// seizeReply describes h, made by a seize, sealed now, with the seizer's
// share of its domain. Called with s.mu held.
func (s *Server) seizeReply(h *hold, now time.Time) domainwire.SeizeReply {
	k, id := s.holds.key(h), s.holds.id(h)
	groups := k.groups
	if groups == nil {
		groups = []string{}
	}
	return domainwire.SeizeReply{HoldID: id, Seal: s.seal(id, k, h.copies, now), Namespace: k.res.ns, Resource: k.res.name, Domain: k.domain, Groups: groups,
		Copies: h.copies, TTLMillis: s.opts.HoldTTL.Milliseconds(), Fail: k.res.src.Fail.String(), Share: s.share(k.res, k.clientID, k.domain, now)}
}
