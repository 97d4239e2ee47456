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
	"strings"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Link asks one parent node.
type Link struct {
	nc            *nats.Conn
	parent, child string
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
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("tree: encode request: %w", err)
	}
	msg := nats.NewMsg(l.Subject())
	msg.Data = data
	msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
	m, err := l.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("tree: %s: %w (%w)", l.Subject(), ErrNoParent, err)
	case err != nil:
		return nil, fmt.Errorf("tree: %s: %w", l.Subject(), err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("tree: parent %s answered error %s: %s", l.parent, code, m.Header.Get("Nats-Service-Error"))
	}
	var resp allotpb.GetServerCapacityResponse
	if err := wire.Unmarshal(wire.ReplyEncodingOf(m.Header), m.Data, &resp); err != nil {
		return nil, fmt.Errorf("tree: decode the answer of %s: %w", l.parent, err)
	}
	for _, r := range resp.GetResponse() {
		if strings.TrimSpace(r.GetResourceId()) == "" || r.GetGets() == nil {
			return nil, fmt.Errorf("tree: the answer of %s has an entry without resource or lease", l.parent)
		}
	}
	return &resp, nil
}
