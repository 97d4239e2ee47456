package quotaserver

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/reply"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// handlePartition serves allot.<node>.quota.p.<i>.<op>.<namespace>.<name>,
// where the subject mapping delivers the bucket subjects.
func (s *Server) handlePartition(m micro.Request) {
	rest := strings.TrimPrefix(m.Subject(), s.prefix)
	var tenant string
	if after, ok := strings.CutPrefix(rest, "t."); ok {
		tenant, rest, _ = strings.Cut(after, ".")
	}
	op, bucket, _ := strings.Cut(rest, ".")
	ns, name, ok := strings.Cut(bucket, ".")
	switch {
	case ok && op == "take" && !strings.Contains(name, "."):
		s.take(m, tenant, ns, name, true)
	case ok && op == "report" && !strings.Contains(name, "."):
		s.report(m, tenant, ns, name, true)
	default:
		s.replyError(m, wire.EncodingOf(m.Headers()), reply.CodeUnknownEndpoint,
			fmt.Sprintf("unknown quota subject %q: want %stake.NAMESPACE.NAME or %sreport.NAMESPACE.NAME", m.Subject(), s.prefix, s.prefix))
	}
}

// handleBucketTake serves allot.<node>.quota.take.<namespace>.<name> when
// one partition owns every bucket.
func (s *Server) handleBucketTake(m micro.Request) {
	ns, name := bucketTokens(m.Subject())
	s.take(m, "", ns, name, true)
}

// handleBucketReport serves allot.<node>.quota.report.<namespace>.<name>
// when one partition owns every bucket.
func (s *Server) handleBucketReport(m micro.Request) {
	ns, name := bucketTokens(m.Subject())
	s.report(m, "", ns, name, true)
}

// handleTenantBucketTake and handleTenantBucketReport serve a tenant's
// bucket subjects (TenantSubject) when one partition owns every bucket.
func (s *Server) handleTenantBucketTake(m micro.Request) {
	ns, name := bucketTokens(m.Subject())
	s.take(m, subjects.TenantOf(m.Subject()), ns, name, true)
}

func (s *Server) handleTenantBucketReport(m micro.Request) {
	ns, name := bucketTokens(m.Subject())
	s.report(m, subjects.TenantOf(m.Subject()), ns, name, true)
}

// handlePlainTake serves allot.<node>.quota.take (bucket in the payload).
func (s *Server) handlePlainTake(m micro.Request) { s.take(m, "", "", "", false) }

// handlePlainReport serves allot.<node>.quota.report.
func (s *Server) handlePlainReport(m micro.Request) { s.report(m, "", "", "", false) }

// handleTenantTake and handleTenantReport serve a tenant's
// allot.t.<tenant>.<node>.quota.take and .report.
func (s *Server) handleTenantTake(m micro.Request) {
	s.take(m, subjects.TenantOf(m.Subject()), "", "", false)
}

func (s *Server) handleTenantReport(m micro.Request) {
	s.report(m, subjects.TenantOf(m.Subject()), "", "", false)
}

// bucketTokens returns the last two tokens of subject.
func bucketTokens(subject string) (ns, name string) {
	i := strings.LastIndexByte(subject, '.')
	j := strings.LastIndexByte(subject[:i], '.')
	return subject[j+1 : i], subject[i+1:]
}

// take decides one take for tenant ("" outside tenant subjects).
// inSubject says the bucket is named by the subject (ns, name); a bucket
// in the payload must then agree with it.
func (s *Server) take(m micro.Request, tenant, ns, name string, inSubject bool) {
	enc := wire.EncodingOf(m.Headers())
	var t wire.QuotaTake
	var err error
	if inSubject {
		err = wire.DecodeQuotaTakeOn(enc, m.Data(), ns, name, &t)
	} else {
		err = wire.DecodeQuotaTake(enc, m.Data(), &t)
	}
	if err != nil {
		code := reply.CodeBadRequest
		if errors.Is(err, wire.ErrTooLarge) {
			code = reply.CodeTooLarge
		}
		s.replyError(m, enc, code, "quota take: "+strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": "))
		return
	}
	if err := s.checkTenant(tenant, t.Namespace, t.Name); err != nil {
		s.replyError(m, enc, reply.CodeForbidden, "quota take: "+err.Error())
		return
	}
	if !inSubject && s.opts.Partitions > 1 {
		if tenant != "" {
			s.relay(BucketSubject(s.opts.Node, "take", t.Namespace, t.Name), m, enc)
		} else {
			s.forward(BucketSubject(s.opts.Node, "take", t.Namespace, t.Name), m, m.Data())
		}
		return
	}
	now := s.opts.Now()
	s.refreshConfig()
	d, matched := s.table.Take(t.Namespace, t.Name, t.Request, now.UnixNano())
	d = s.shadow(&t, d, matched)
	s.takes.Add(1)
	if m.Reply() == "" {
		return
	}
	if !s.mayAnswer() {
		s.gate.Silenced.Add(1)
		return
	}
	// One reply buffer per request: the handlers of the endpoints run on
	// their own goroutines, and PublishMsg copies the data.
	var buf [256]byte
	if err := s.nc.PublishMsg(reply.Msg(m.Reply(), enc, wire.AppendQuotaTakeResponse(buf[:0], enc, &d, matched))); err != nil {
		s.log.Debug("reply failed", "err", err)
	}
}

// report applies (or, arriving on the plain subject with several
// partitions, forwards) a batch of reports. Reports are never refused one
// by one: malformed ones are ignored and counted in the acknowledgement,
// which is sent only when the publisher asked for one. A message on a
// bucket's subject that names another bucket is a 400, and nothing of it
// is applied.
func (s *Server) report(m micro.Request, tenant, ns, name string, inSubject bool) {
	enc := wire.EncodingOf(m.Headers())
	var q wire.QuotaReports
	if inSubject {
		var err error
		if q, err = wire.DecodeQuotaReportsOn(enc, m.Data(), ns, name); err != nil {
			s.replyError(m, enc, reply.CodeBadRequest, "quota report: "+strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": "))
			return
		}
	} else {
		q = wire.DecodeQuotaReports(enc, m.Data())
	}
	s.dropClosedReports(tenant, &q)
	var applied int
	if !inSubject && s.opts.Partitions > 1 {
		applied = s.forwardReports(enc, &q)
	} else {
		now := s.opts.Now()
		s.refreshConfig()
		for _, r := range q.Reports {
			if err := s.table.Report(r.Namespace, r.Name, r.Tokens, now.UnixNano()); err != nil {
				// Counted as ignored below, with every report not applied.
				if q.Error == "" {
					q.Error = err.Error()
				}
				continue
			}
			applied++
		}
		s.reports.Add(uint64(applied))
	}
	if m.Reply() != "" {
		// Accepted counts the valid reports; those not applied (no bucket,
		// not forwarded) move to Ignored.
		ack := q.QuotaReportResponse()
		ack.Ignored += ack.Accepted - int32(applied)
		ack.Accepted = int32(applied)
		s.respond(m, enc, ack)
	}
}

// checkTenant refuses a tenant's take or report of bucket ns:name when
// the namespace lists other tenants only, or when the global default
// bucket would answer and namespace _default lists other tenants only.
// Requests outside tenant subjects (the service's own account) are not
// checked.
func (s *Server) checkTenant(tenant, ns, name string) error {
	if tenant == "" {
		return nil
	}
	s.refreshConfig()
	cfg := s.cfg.Load()
	if cfg == nil {
		return nil
	}
	n := cfg.Namespaces[ns]
	if n != nil && len(n.Tenants) > 0 && !slices.Contains(n.Tenants, tenant) {
		return fmt.Errorf("quota namespace %q is not open to tenant %q (its tenants are %q)", ns, tenant, n.Tenants)
	}
	if n != nil && (n.Buckets[name] != nil || n.Dynamic != nil || n.Default != nil) {
		return nil // the namespace's own bucket answers
	}
	if d := cfg.Namespaces[quota.GlobalDefault]; d != nil && len(d.Tenants) > 0 && !slices.Contains(d.Tenants, tenant) {
		return fmt.Errorf("the global default bucket (namespace %s), which answers for %s:%s, is not open to tenant %q (its tenants are %q)",
			quota.GlobalDefault, ns, name, tenant, d.Tenants)
	}
	return nil
}

// dropClosedReports removes from q the reports of buckets not open to
// tenant, counting them as ignored. Forwarded reports are published on
// the plain bucket subjects, so this runs before forwarding.
func (s *Server) dropClosedReports(tenant string, q *wire.QuotaReports) {
	if tenant == "" {
		return
	}
	kept := q.Reports[:0]
	for _, r := range q.Reports {
		if err := s.checkTenant(tenant, r.Namespace, r.Name); err != nil {
			q.Ignored++
			if q.Error == "" {
				q.Error = fmt.Sprintf("report for %q: %v", r.Bucket, err)
			}
			continue
		}
		kept = append(kept, r)
	}
	q.Reports = kept
}

// forwardReports publishes the reports of q, one message per bucket, to
// their buckets' subjects, and returns how many it passed on.
func (s *Server) forwardReports(enc wire.Encoding, q *wire.QuotaReports) int {
	groups := map[string]*allotpb.QuotaReportBatch{}
	var order []wire.QuotaReport
	for _, r := range q.Reports {
		b := groups[r.Bucket]
		if b == nil {
			b = &allotpb.QuotaReportBatch{ClientId: q.ClientID}
			groups[r.Bucket] = b
			order = append(order, r)
		}
		b.Reports = append(b.Reports, &allotpb.QuotaReport{Bucket: r.Bucket, Tokens: r.Tokens})
	}
	var h nats.Header
	if enc == wire.Protobuf {
		h = nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}
	}
	n := 0
	for _, r := range order {
		b := groups[r.Bucket]
		data, err := wire.Marshal(enc, b)
		if err != nil {
			s.log.Warn("encoding forwarded reports", "err", err)
			continue
		}
		if !s.mayAnswer() {
			s.gate.Silenced.Add(1)
			return n
		}
		if err := s.nc.PublishMsg(&nats.Msg{Subject: BucketSubject(s.opts.Node, "report", r.Namespace, r.Name), Header: h, Data: data}); err != nil {
			s.log.Debug("forward reports failed", "bucket", r.Bucket, "err", err)
			continue
		}
		s.forwarded.Add(1)
		n += len(b.Reports)
	}
	return n
}

// forward passes a request on to subject with its reply subject and
// headers, so that the owning partition answers the requester directly.
func (s *Server) forward(subject string, m micro.Request, data []byte) {
	if !s.mayAnswer() {
		s.gate.Silenced.Add(1)
		return
	}
	// Counted first: the owner may answer before PublishMsg returns.
	s.forwarded.Add(1)
	if err := s.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: m.Reply(), Header: nats.Header(m.Headers()), Data: data}); err != nil {
		s.log.Debug("forward failed", "subject", subject, "err", err)
	}
}

// relayTimeout bounds how long partition 0 waits for the owner's answer
// to a relayed take.
const relayTimeout = 2 * time.Second

// relay asks subject's owner on the requester's behalf and passes the
// answer back: a tenant's reply subject (_R_.… of its import) may only be
// answered by the subscriber that received the request, so the request
// cannot be forwarded with it as forward does. It does not wait: the
// answer is passed on from its own goroutine.
func (s *Server) relay(subject string, m micro.Request, enc wire.Encoding) {
	if !s.mayAnswer() {
		s.gate.Silenced.Add(1)
		return
	}
	if m.Reply() == "" {
		s.forward(subject, m, m.Data()) // nobody to answer
		return
	}
	s.forwarded.Add(1)
	req := &nats.Msg{Subject: subject, Header: nats.Header(m.Headers()), Data: m.Data()}
	go func() {
		resp, err := s.nc.RequestMsg(req, relayTimeout)
		if err != nil {
			s.replyError(m, enc, reply.CodeUnavailable, "quota take: the partition owning the namespace did not answer: "+err.Error())
			return
		}
		if !s.mayAnswer() {
			s.gate.Silenced.Add(1)
			return
		}
		if err := m.Respond(resp.Data, micro.WithHeaders(micro.Headers(resp.Header))); err != nil {
			s.log.Debug("relayed reply failed", "err", err)
		}
	}()
}

// respond sends a successful reply in the request's encoding, unless the
// server may no longer answer.
func (s *Server) respond(m micro.Request, enc wire.Encoding, msg proto.Message) {
	if m.Reply() == "" {
		return
	}
	out, err := reply.Marshal(m.Reply(), enc, msg)
	if err != nil {
		s.replyError(m, enc, reply.CodeInternal, err.Error())
		return
	}
	if !s.mayAnswer() {
		s.gate.Silenced.Add(1)
		return
	}
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Debug("reply failed", "err", err)
	}
}

// replyError answers with an error reply that micro counts in STATS.
func (s *Server) replyError(m micro.Request, enc wire.Encoding, code int, text string) {
	if !s.mayAnswer() {
		s.gate.Silenced.Add(1)
		return
	}
	if err := reply.Error(m, enc, code, text); err != nil {
		s.log.Debug("error reply failed", "err", err)
	}
}
