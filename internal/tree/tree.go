// Package tree is a child node's link to its parent node: its
// coordinator asks the parent's coordinator for capacity on behalf of
// all its clients, over allot.<parent>.server.get (GetServerCapacity),
// which reaches the parent's NATS server through a leaf-node connection.
// What to ask and what the answer means is internal/ledger's; this
// package only carries it.
package tree

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Link asks one parent node. When the parent spreads its resources over
// lease partitions (its answers say how many, Allot-Lease-Partitions),
// the link asks each partition for the resources it owns (AskAll).
type Link struct {
	nc            *nats.Conn
	parent, child string
	// parts is the parent's lease partitions as last told; used by one
	// goroutine at a time (the coordinator's upstream).
	parts int
}

// NewLink returns the link of node child to the coordinator of node
// parent.
func NewLink(nc *nats.Conn, parent, child string) *Link {
	return &Link{nc: nc, parent: parent, child: child}
}

// Subject is the subject the link asks on:
// allot.<parent>.server.get.<child>. The child's name in the subject lets
// a deployment allow each child's link only its own subject (see
// docs/security.md); the parent answers only requests whose server_id is
// that name.
func (l *Link) Subject() string { return subjects.ChildServerGet(l.parent, l.child) }

// ErrNoParent means no coordinator of the parent node answered: the leaf
// link is cut, or the parent has no serving leader.
var ErrNoParent = errors.New("no coordinator of the parent node answered")

// Ask sends req in binary protobuf and returns the parent's answer; ctx
// bounds the wait.
func (l *Link) Ask(ctx context.Context, req *allotpb.GetServerCapacityRequest) (*allotpb.GetServerCapacityResponse, error) {
	resp, _, err := l.ask(ctx, l.Subject(), req)
	return resp, err
}

// Answer is one of the parent's coordinators' answer to AskAll: lease
// partition Part of Parts (Parts 0: the parent's plain subject).
type Answer struct {
	Part, Parts int
	Resp        *allotpb.GetServerCapacityResponse
	Err         error
}

// AskAll asks the parent for req's resources: on its plain subject while
// it is not known to have lease partitions, else each partition for the
// resources it owns, all at once. It learns the partition count from
// every answer, for the next ask.
func (l *Link) AskAll(ctx context.Context, req *allotpb.GetServerCapacityRequest) []Answer {
	n := l.parts
	if n <= 1 {
		resp, parts, err := l.ask(ctx, l.Subject(), req)
		l.learn(parts)
		return []Answer{{Resp: resp, Err: err}}
	}
	byPart := make([]*allotpb.GetServerCapacityRequest, n)
	for _, r := range req.GetResource() {
		p := subjects.LeasePartition(r.GetResourceId(), n)
		if byPart[p] == nil {
			byPart[p] = &allotpb.GetServerCapacityRequest{ServerId: req.GetServerId()}
		}
		byPart[p].Resource = append(byPart[p].Resource, r)
	}
	out := make([]Answer, 0, n)
	learned := make([]int, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for p, sub := range byPart {
		if sub == nil {
			continue
		}
		wg.Go(func() {
			subj := subjects.LeaseSubject(l.parent, "server.get."+l.child, p, n)
			resp, parts, err := l.ask(ctx, subj, sub)
			if errors.Is(err, nats.ErrNoResponders) {
				// The partition has no leader now, or the parent no
				// longer has partitions: its plain subject answers
				// (partition 0 relays), and says which.
				resp, parts, err = l.ask(ctx, l.Subject(), sub)
			}
			mu.Lock()
			out = append(out, Answer{Part: p, Parts: n, Resp: resp, Err: err})
			learned[p] = parts
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, parts := range learned {
		l.learn(parts)
	}
	return out
}

// learn takes the partition count an answer said (0: no answer).
func (l *Link) learn(parts int) {
	if parts > 0 {
		l.parts = parts
	}
}

// ask sends req to subj; it returns the answer and the partition count
// the reply said (0 without a reply).
func (l *Link) ask(ctx context.Context, subj string, req *allotpb.GetServerCapacityRequest) (*allotpb.GetServerCapacityResponse, int, error) {
	resp, h, err := l.askMsg(ctx, subj, req)
	parts := 0
	if h != nil {
		parts = 1
		if v, perr := strconv.Atoi(h.Get(wire.HeaderLeasePartitions)); perr == nil && v >= 1 && v <= subjects.MaxLeasePartitions {
			parts = v
		}
	}
	return resp, parts, err
}

func (l *Link) askMsg(ctx context.Context, subj string, req *allotpb.GetServerCapacityRequest) (*allotpb.GetServerCapacityResponse, nats.Header, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("tree: encode request: %w", err)
	}
	msg := nats.NewMsg(subj)
	msg.Data = data
	msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
	m, err := l.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, nil, fmt.Errorf("tree: %s: %w (%w)", subj, ErrNoParent, err)
	case err != nil:
		return nil, nil, fmt.Errorf("tree: %s: %w", subj, err)
	}
	h := m.Header
	if h == nil {
		h = nats.Header{}
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, h, fmt.Errorf("tree: parent %s answered error %s: %s", l.parent, code, m.Header.Get("Nats-Service-Error"))
	}
	var resp allotpb.GetServerCapacityResponse
	if err := wire.Unmarshal(wire.ReplyEncodingOf(m.Header), m.Data, &resp); err != nil {
		return nil, h, fmt.Errorf("tree: decode the answer of %s: %w", l.parent, err)
	}
	for _, r := range resp.GetResponse() {
		if strings.TrimSpace(r.GetResourceId()) == "" || r.GetGets() == nil {
			return nil, h, fmt.Errorf("tree: the answer of %s has an entry without resource or lease", l.parent)
		}
	}
	return &resp, h, nil
}
