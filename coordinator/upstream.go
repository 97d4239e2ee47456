package coordinator

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/tree"
	"github.com/allot/allot/proto/allotpb"
)

// upstream asks the parent node for capacity on a goroutine of its own,
// so no round waits on the parent; the loop hands it the demand and
// installs the answers (see internal/ledger/tree.go).
type upstream struct {
	link *tree.Link
	in   chan []*allotpb.GetServerCapacityRequest
	out  chan upstreamResult
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	busy    bool      // owned by the loop: an ask is in flight
	lastAsk time.Time // owned by the loop: when the last ask started
	// Owned by the loop, copied into STATS.
	lastOK  time.Time
	lastErr string
}

type upstreamResult struct {
	resps []tree.Answer // those without Err
	err   error
}

// upstreamTimeout bounds one ask.
const upstreamTimeout = 2 * time.Second

func newUpstream(c *Coordinator) *upstream {
	ctx, cancel := context.WithCancel(context.Background())
	u := &upstream{link: tree.NewLink(c.nc, c.opts.Parent, c.opts.Node), in: make(chan []*allotpb.GetServerCapacityRequest, 1),
		out: make(chan upstreamResult, 1), ctx: ctx, stop: cancel}
	u.wg.Add(1)
	go u.run()
	return u
}

func (u *upstream) run() {
	defer u.wg.Done()
	for {
		select {
		case <-u.ctx.Done():
			return
		case reqs := <-u.in:
			res := upstreamResult{}
			// Each of the parent's lease partitions answers for its own
			// resources: one that fails leaves the others' answers.
			for _, req := range reqs {
				ctx, cancel := context.WithTimeout(u.ctx, upstreamTimeout)
				answered := false
				for _, a := range u.link.AskAll(ctx, req) {
					if a.Err != nil {
						res.err = cmp.Or(res.err, a.Err)
						continue
					}
					answered = true
					res.resps = append(res.resps, a)
				}
				cancel()
				if !answered {
					break // the parent is unreachable: the rest would only wait too
				}
			}
			select {
			case u.out <- res:
			case <-u.ctx.Done():
				return
			}
		}
	}
}

func (u *upstream) close() {
	if u != nil {
		u.stop()
		u.wg.Wait()
	}
}

// askParent hands the current demand to the upstream goroutine, unless an
// ask is in flight.
func (c *Coordinator) askParent() {
	u := c.up
	if u == nil || u.busy {
		return
	}
	reqs := c.ledger.UpstreamRequests(c.now().UnixNano(), c.opts.Node)
	if len(reqs) == 0 {
		return
	}
	u.busy, u.lastAsk = true, c.now()
	u.in <- reqs
}

// answered installs the parent's answers.
func (c *Coordinator) answered(res upstreamResult) {
	u := c.up
	u.busy = false
	now := c.now().UnixNano()
	for _, a := range res.resps {
		if !c.ledger.SetUpstreamFrom(now, ledger.UpstreamSource{Part: a.Part, Parts: a.Parts}, a.Resp) {
			c.log.Warn("answer of a deposed parent leader ignored", "parent", c.opts.Parent, "lease_partition", a.Part, "term", a.Resp.GetTerm())
		}
	}
	if res.err != nil {
		if u.lastErr == "" {
			c.log.Warn("cannot reach the parent node: serving on the leases held, then on the safe capacity", "parent", c.opts.Parent, "err", res.err)
		}
		u.lastErr = res.err.Error()
		return
	}
	if u.lastErr != "" {
		c.log.Info("parent node reachable again", "parent", c.opts.Parent)
	}
	u.lastOK, u.lastErr = c.now(), ""
}
