package rlqsserver

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/rlqs"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Refresh pacing of a claimant.
const (
	// firstRefresh is the refresh interval before any lease says
	// otherwise, and the longest backoff.
	firstRefresh = 5 * time.Second
	// minGap bounds how soon a refresh follows the previous one.
	minGap = 20 * time.Millisecond
	// backoffBase is the first retry delay after a failed refresh.
	backoffBase = 100 * time.Millisecond
)

// claimant is one Envoy stream: the coordinator's client for its buckets.
type claimant struct {
	s        *Service
	domain   string
	clientID string
	stream   rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer
	subj     string

	// buckets by their resource; ids keeps each one's bucket id as Envoy
	// sent it, to answer with.
	buckets map[string]*bucket
	term    uint64
	// stale counts refreshes in a row answered only by a lower term.
	stale    int
	failures int
	next     time.Time // the next refresh
	last     time.Time // the last refresh
}

// bucket is one of a stream's buckets.
type bucket struct {
	core *rlqs.Bucket
	id   *rlqspb.BucketId
	// governed: a template with an rlqs/ glob matches its resource.
	governed bool
	// shadow: the coordinator says the resource is in shadow mode.
	shadow bool
}

func newClaimant(s *Service, domain, clientID string, stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) *claimant {
	return &claimant{s: s, domain: domain, clientID: clientID, stream: stream,
		subj: subjects.Coordinator(s.opts.Node, subjects.CapacityGet), buckets: map[string]*bucket{}}
}

// run serves the stream until Envoy closes it or ctx ends.
func (c *claimant) run(ctx context.Context, first *rlqspb.RateLimitQuotaUsageReports) error {
	reports := make(chan *rlqspb.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := c.stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				recvErr <- ctx.Err()
				return
			}
		}
	}()
	c.handle(first)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := c.s.opts.Now()
		if !now.Before(c.next) && !now.Before(c.last.Add(minGap)) {
			if err := c.refresh(ctx, now); err != nil {
				return err
			}
			now = c.s.opts.Now()
		}
		if err := c.abandonIdle(now); err != nil {
			return err
		}
		wake := c.next
		if g := c.last.Add(minGap); wake.Before(g) {
			wake = g
		}
		timer.Reset(max(wake.Sub(now), time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			return endOf(err)
		case m := <-reports:
			c.handle(m)
		case <-timer.C:
		}
	}
}

// handle folds a usage report in. A new governed bucket is claimed at
// once.
func (c *claimant) handle(m *rlqspb.RateLimitQuotaUsageReports) {
	now := c.s.opts.Now()
	set := c.s.opts.Templates()
	for _, u := range m.GetBucketQuotaUsages() {
		id, ok := rlqs.Resource(c.domain, u.GetBucketId().GetBucket())
		if !ok {
			continue
		}
		b := c.buckets[id]
		if b == nil {
			if len(c.buckets) >= c.s.opts.MaxBuckets {
				continue
			}
			b = &bucket{core: rlqs.NewBucket(id, now, c.s.opts.Buckets), id: u.GetBucketId()}
			c.buckets[id] = b
			if b.governed = governs(set, id); b.governed {
				c.next = now // its first assignment comes from the next round
			}
		}
		b.core.Report(now, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), u.GetTimeElapsed().AsDuration())
	}
}

// governs reports whether a template with an rlqs/ glob matches resource
// id: the fallback and catch-all globs such as "*" do not count.
func governs(set *config.Set, id string) bool {
	t := set.Match(id)
	return t != nil && t != set.Fallback() && strings.HasPrefix(t.Glob, rlqs.Prefix)
}

// refresh asks the coordinator for every governed bucket's lease and
// sends Envoy the assignments. Templates are looked at again: a bucket
// whose template appeared is claimed, one whose template is gone is
// abandoned. It fails only when the stream does.
func (c *claimant) refresh(ctx context.Context, now time.Time) error {
	c.last, c.next = now, now.Add(firstRefresh)
	set := c.s.opts.Templates()
	var abandon []*bucket
	var rrs []*allotpb.ResourceRequest
	var sent []*bucket
	for _, id := range slices.Sorted(maps.Keys(c.buckets)) {
		b := c.buckets[id]
		was := b.governed
		if b.governed = governs(set, id); was && !b.governed {
			// Its template is gone: Envoy goes back to its own rules.
			abandon = append(abandon, b)
			delete(c.buckets, id)
			continue
		}
		if !b.governed {
			continue
		}
		rr := &allotpb.ResourceRequest{ResourceId: id, Wants: b.core.Wants()}
		if capacity, expiry := b.core.Has(now); !expiry.IsZero() {
			rr.Has = &allotpb.Lease{Capacity: capacity, ExpiryTime: timestamppb.New(expiry)}
		}
		if l, ok := b.core.Lease(); ok && l.Safe > 0 && now.Before(l.SafeUntil) {
			rr.Safe = &allotpb.Lease{Capacity: l.Safe, ExpiryTime: timestamppb.New(l.SafeUntil)}
		}
		rrs = append(rrs, rr)
		sent = append(sent, b)
	}
	if len(abandon) > 0 {
		if err := c.sendAbandon(abandon); err != nil {
			return err
		}
	}
	if len(rrs) == 0 {
		return nil
	}
	resp, err := c.get(ctx, &allotpb.GetCapacityRequest{ClientId: c.clientID, Resource: rrs})
	if err == nil && resp.GetTerm() < c.term {
		// A deposed coordinator's answer; after three in a row the higher
		// term is gone (or was never real).
		if c.stale++; c.stale < 3 {
			err = fmt.Errorf("reply of term %d below %d", resp.GetTerm(), c.term)
		}
	}
	if err != nil {
		c.failures++
		c.next = now.Add(min(backoffBase<<min(c.failures-1, 6), firstRefresh))
		c.s.log.Debug("rlqs: GetCapacity failed", "client_id", c.clientID, "err", err)
		return c.assign(sent, now) // the floors, once leases have lapsed
	}
	c.failures, c.stale, c.term = 0, 0, resp.GetTerm()
	interval := time.Duration(0)
	for i, r := range resp.GetResponse() {
		if i >= len(sent) || r.GetResourceId() != sent[i].core.Resource {
			break
		}
		b := sent[i]
		if r.GetErrorCode() != 0 || r.GetGets() == nil {
			c.s.log.Debug("rlqs: resource refused", "resource", r.GetResourceId(), "code", r.GetErrorCode(), "err", r.GetError())
			continue
		}
		g := r.GetGets()
		l := rlqs.Lease{Capacity: g.GetCapacity(), Expiry: g.GetExpiryTime().AsTime(), Safe: r.GetSafeCapacity()}
		if r.GetSafeExpiryTime() != nil {
			l.SafeUntil = r.GetSafeExpiryTime().AsTime()
		}
		b.core.Grant(l)
		b.shadow = r.GetShadow()
		if ri := g.GetRefreshInterval().AsDuration(); ri > 0 && (interval == 0 || ri < interval) {
			interval = ri
		}
	}
	if interval == 0 {
		interval = firstRefresh
	}
	c.next = now.Add(interval)
	return c.assign(sent, c.s.opts.Now())
}

// get sends a GetCapacity request in binary protobuf.
func (c *claimant) get(ctx context.Context, req *allotpb.GetCapacityRequest) (*allotpb.GetCapacityResponse, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.s.opts.RequestTimeout)
	defer cancel()
	m, err := c.s.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: c.subj, Data: data,
		Header: nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}})
	if err != nil {
		return nil, err
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return nil, fmt.Errorf("coordinator error %d: %s", n, m.Header.Get(micro.ErrorHeader))
	}
	var resp allotpb.GetCapacityResponse
	if err := proto.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("decoding the coordinator's reply: %w", err)
	}
	return &resp, nil
}

// assign sends Envoy each bucket's assignment as of now.
func (c *claimant) assign(bs []*bucket, now time.Time) error {
	resp := &rlqspb.RateLimitQuotaResponse{}
	for _, b := range bs {
		rate, until, ok := b.core.Assignment(now)
		if !ok {
			continue
		}
		strategy := rlqs.Strategy(rate)
		if b.shadow {
			// Shadow mode: the lease is counted, Envoy enforces nothing.
			strategy = rlqs.Strategy(math.Inf(1))
		}
		resp.BucketAction = append(resp.BucketAction, &rlqspb.RateLimitQuotaResponse_BucketAction{
			BucketId: b.id,
			BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: durationpb.New(until.Sub(now)),
					RateLimitStrategy:    strategy,
				}},
		})
		b.core.Sent(now, rate, until)
	}
	if len(resp.BucketAction) == 0 {
		return nil
	}
	if err := c.stream.Send(resp); err != nil {
		return fmt.Errorf("rlqs: sending assignments: %w", err)
	}
	c.s.assignments.Add(uint64(len(resp.BucketAction)))
	return nil
}

// abandonIdle abandons the buckets that have reported no requests for
// the abandon time: Envoy forgets them, and the leases lapse.
func (c *claimant) abandonIdle(now time.Time) error {
	var idle []*bucket
	for id, b := range c.buckets {
		if b.core.Idle(now) {
			delete(c.buckets, id)
			if b.governed {
				idle = append(idle, b)
			}
		}
	}
	if len(idle) > 0 {
		return c.sendAbandon(idle)
	}
	return nil
}

// sendAbandon tells Envoy to abandon bs.
func (c *claimant) sendAbandon(bs []*bucket) error {
	resp := &rlqspb.RateLimitQuotaResponse{}
	for _, b := range bs {
		resp.BucketAction = append(resp.BucketAction, &rlqspb.RateLimitQuotaResponse_BucketAction{
			BucketId:     b.id,
			BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
		})
	}
	if err := c.stream.Send(resp); err != nil {
		return fmt.Errorf("rlqs: sending abandon actions: %w", err)
	}
	c.s.abandons.Add(uint64(len(bs)))
	return nil
}
