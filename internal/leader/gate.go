package leader

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/allot/allot/status"
)

// ErrLapsed is why a gate fails once its leadership's validity deadline
// has passed.
var ErrLapsed = errors.New("leadership lapsed (validity deadline passed)")

// Gate decides whether the server of one leadership term may still
// reply: not after Close, not after it failed, and not once its validity
// (the leadership's deadline) has lapsed, which fails it. A server asks
// it before every reply, so that a deposed or frozen leader stays silent
// instead of answering beside its successor.
type Gate struct {
	valid func() bool
	log   *slog.Logger
	what  string

	// Silenced counts replies withheld.
	Silenced atomic.Uint64

	closed  atomic.Bool
	quit    chan struct{}
	once    sync.Once
	failure atomic.Pointer[error]
}

// NewGate returns an open gate. valid, if not nil, is asked before every
// reply; what names the server in the log line of a failure.
func NewGate(valid func() bool, log *slog.Logger, what string) *Gate {
	if log == nil {
		log = slog.Default()
	}
	return &Gate{valid: valid, log: log, what: what, quit: make(chan struct{})}
}

// Open reports whether a reply may be sent now. A lapsed validity fails
// the gate for good.
func (g *Gate) Open() bool {
	if g.closed.Load() {
		return false
	}
	select {
	case <-g.quit:
		return false
	default:
	}
	if g.valid != nil && !g.valid() {
		g.Fail(ErrLapsed)
		return false
	}
	return true
}

// Close shuts the gate for good: the server has stopped.
func (g *Gate) Close() { g.closed.Store(true) }

// Closed reports whether Close was called.
func (g *Gate) Closed() bool { return g.closed.Load() }

// Fail shuts the gate because the server may no longer serve on its own
// account; the first err is kept and Done is closed.
func (g *Gate) Fail(err error) {
	g.once.Do(func() {
		g.failure.Store(&err)
		g.log.Error(g.what+" stops answering", "err", err)
		close(g.quit)
	})
}

// Done is closed once the gate failed.
func (g *Gate) Done() <-chan struct{} { return g.quit }

// Err returns why the gate failed, or nil.
func (g *Gate) Err() error {
	if p := g.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// Serving reports whether the server is neither closed nor failed.
func (g *Gate) Serving() bool { return !g.closed.Load() && g.Err() == nil }

// PartitionStatus is how a partition's leader reports itself in its
// STATS: who and which partition it is, its term, whether it serves and
// why it stopped on its own.
func (g *Gate) PartitionStatus(node, serverID string, partition, partitions int, term uint64) status.PartitionLeader {
	st := status.PartitionLeader{Node: node, ServerID: serverID, Partition: partition, Partitions: partitions, Term: term, Serving: g.Serving()}
	if err := g.Err(); err != nil {
		st.Failure = err.Error()
	}
	return st
}
