package envoyserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoywire"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// DefaultCountTimeout bounds a count request over NATS when the caller's
// context has no earlier deadline.
const DefaultCountTimeout = time.Second

// ErrNoPartition is why a count failed when no partition leader answers
// the domain's subject (none elected yet, or none serves that partition).
var ErrNoPartition = errors.New("no envoy partition leader answers")

// RouterOptions configure a Router.
type RouterOptions struct {
	// Node is the tree node whose partitions count. Default "root".
	Node string
	// Partitions is the partition count, for answering in process. Zero:
	// unknown (a sidecar), every count goes over NATS.
	Partitions int
	// Local, if set, returns this process's server of partition p, or nil
	// if it has none. When that server serves, the domain's counters are
	// counted by it directly, with no NATS round trip.
	Local func(p int) *Server
	// Timeout bounds a count over NATS. Default DefaultCountTimeout.
	Timeout time.Duration
}

// Router is the envoyrl.Store of the gRPC front ends: it counts each
// domain's counters at the partition that owns it. Safe for concurrent
// use.
type Router struct {
	nc   *nats.Conn
	opts RouterOptions
}

// NewRouter returns a Router counting over nc.
func NewRouter(nc *nats.Conn, opts RouterOptions) (*Router, error) {
	if nc == nil {
		return nil, errors.New("envoyserver: nil NATS connection")
	}
	if opts.Node == "" {
		opts.Node = "root"
	}
	if opts.Partitions < 0 || opts.Partitions > MaxPartitions {
		return nil, fmt.Errorf("envoyserver: %d partitions: want 0 to %d", opts.Partitions, MaxPartitions)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultCountTimeout
	}
	return &Router{nc: nc, opts: opts}, nil
}

var _ envoyrl.Store = (*Router)(nil)

// Increment implements envoyrl.Store.
func (r *Router) Increment(ctx context.Context, now time.Time, incs []envoyrl.Increment) ([]uint64, error) {
	return r.count(ctx, now, incs, false)
}

// Get implements envoyrl.Store.
func (r *Router) Get(ctx context.Context, now time.Time, incs []envoyrl.Increment) ([]uint64, error) {
	return r.count(ctx, now, incs, true)
}

func (r *Router) count(ctx context.Context, now time.Time, incs []envoyrl.Increment, readOnly bool) ([]uint64, error) {
	if len(incs) == 0 {
		return nil, nil
	}
	domain := incs[0].Domain
	if r.opts.Local != nil && r.opts.Partitions > 0 {
		if srv := r.opts.Local(envoywire.Partition(domain, r.opts.Partitions)); srv != nil {
			var vals []uint64
			var err error
			if readOnly {
				vals, err = srv.Get(ctx, now, incs)
			} else {
				vals, err = srv.Increment(ctx, now, incs)
			}
			if !errors.Is(err, ErrNotServing) {
				return vals, err
			}
		}
	}
	return r.remote(ctx, domain, incs, readOnly)
}

// remote counts over NATS, in binary protobuf.
func (r *Router) remote(ctx context.Context, domain string, incs []envoyrl.Increment, readOnly bool) ([]uint64, error) {
	req := &allotpb.EnvoyCountRequest{Domain: domain, ReadOnly: readOnly, Counters: make([]*allotpb.EnvoyCounter, len(incs))}
	for i, inc := range incs {
		c := &allotpb.EnvoyCounter{Key: inc.Key, Expires: inc.Expires.Unix()}
		if !readOnly {
			c.Hits = inc.Hits
		}
		req.Counters[i] = c
	}
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("envoy count: encoding: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	subj := envoywire.CountSubject(r.opts.Node, domain)
	msg := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}}
	m, err := r.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("envoy count on %s: %w (no leader elected yet, or no process serves its partition)", subj, ErrNoPartition)
	case err != nil:
		return nil, fmt.Errorf("envoy count on %s: %w", subj, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return nil, &CountError{Code: n, Msg: m.Header.Get(micro.ErrorHeader)}
	}
	var resp allotpb.EnvoyCountResponse
	if err := proto.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("envoy count on %s: decoding the reply: %w", subj, err)
	}
	if len(resp.GetValues()) != len(incs) {
		return nil, fmt.Errorf("envoy count on %s: %d values for %d counters", subj, len(resp.GetValues()), len(incs))
	}
	return resp.GetValues(), nil
}
