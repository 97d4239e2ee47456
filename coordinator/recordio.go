package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/internal/statekv"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// recordStore keeps the node's lease record in the state bucket (key
// "<node>.leases", or "<node>.leases.<i>" for lease partition i): it reads what a predecessor left, writes the records
// the ledger proposes with compare-and-set on a goroutine of its own (so
// no round waits on KV), and checks every few seconds that the stored
// record is still ours. It recovers on its own from a deleted record, an
// operator's edit and a deleted bucket: as leader it knows the truth, so
// it writes its record again; a record of a newer, genuine term deposes
// it instead.
type recordStore struct {
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger
	key  string

	// Owned by Start, then by the writer goroutine.
	kv  jetstream.KeyValue
	rev uint64 // revision of our last write (0: create)

	in   chan *ledger.Proposal
	out  chan storeResult
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// storeResult reports a write, or a check that found the record changed.
type storeResult struct {
	p       *ledger.Proposal // nil for a check
	err     error
	rewrite bool          // the stored record is not our last: write ours again
	foreign bool          // nor any of ours (deleted, edited, forged)
	took    time.Duration // how long the write took, retries included
}

// errDeposed wraps failures caused by a newer leader's record.
var errDeposed = errors.New("deposed")

// checkInterval is how often a serving leader reads its record back.
const checkInterval = time.Second

// writeTimeout bounds one KV operation.
const writeTimeout = 2 * time.Second

func newRecordStore(js jetstream.JetStream, opts Options, log *slog.Logger) *recordStore {
	ctx, cancel := context.WithCancel(context.Background())
	return &recordStore{js: js, opts: opts, log: log, key: subjects.LeaseRecordKey(opts.Node, opts.Partition, opts.Partitions),
		in: make(chan *ledger.Proposal, 1), out: make(chan storeResult, 4), ctx: ctx, stop: cancel}
}

// open opens the state bucket, creating it if needed; created reports
// that this call created it. An existing bucket is left as configured (an
// operator may have scaled it), but for a history too short for ledger's
// comparison of a record with the one before it.
func (s *recordStore) open(ctx context.Context) (created bool, err error) {
	kv, created, err := s.openKV(ctx)
	if err != nil {
		return false, err
	}
	s.kv = kv
	return created, nil
}

// openKV is open without keeping the handle: the read-back goroutine
// reopens a bucket it found gone, and the writer installs the handle.
func (s *recordStore) openKV(ctx context.Context) (jetstream.KeyValue, bool, error) {
	kv, created, err := statekv.Open(ctx, s.js, s.opts.StateBucket, s.opts.StateReplicas, s.log)
	if err != nil {
		return nil, false, fmt.Errorf("coordinator: %w", err)
	}
	return kv, created, nil
}

// load reads what the predecessor left.
func (s *recordStore) load(ctx context.Context) (ledger.Prior, error) {
	s.rev = 0
	created, err := s.open(ctx)
	if err != nil {
		return ledger.Prior{}, err
	}
	part, err := s.partitioning(ctx, created)
	if err != nil {
		return ledger.Prior{}, err
	}
	entry, err := s.kv.Get(ctx, s.key)
	switch {
	case err == nil:
		s.rev = entry.Revision()
		var h allotpb.LeaseHorizon
		if err := protojson.Unmarshal(entry.Value(), &h); err != nil {
			s.log.Warn("lease record unreadable: learning as after an unknown predecessor", "err", err)
			return ledger.Prior{Kind: ledger.PriorDamaged}, nil
		}
		if entry.Revision() < part.changedAt {
			// Written before the node last changed its number of lease
			// partitions: it speaks for the resources this partition
			// owned then, and says nothing of the leases issued since.
			return s.repartitionedPrior(ctx, "lease record was written before the node's number of lease partitions changed")
		}
		p := ledger.Prior{Kind: ledger.PriorRecord, Record: &h, WrittenAt: entry.Created().UnixNano(), Previous: s.previous(ctx, entry.Revision())}
		if h.GetTerm() > s.opts.Term {
			p.TermBound = s.termBound(ctx)
		}
		if why := ledger.Plausible(&h, p.WrittenAt, p.Previous, s.opts.ClockSkew); why != "" {
			s.log.Error("lease record cannot have been written by a leader ("+why+"): ignored, learning as after an unknown predecessor",
				"record_term", h.GetTerm(), "record_server", h.GetServerId(), "horizon", h.GetHorizon().AsTime())
		}
		return p, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return ledger.Prior{}, fmt.Errorf("coordinator: read lease record %s/%s: %w", s.opts.StateBucket, s.key, err)
	}
	// No record. Gone (a delete or purge marker is left), or never
	// written: only the latter, with no earlier leader, is a new
	// deployment.
	if !created {
		if hist, herr := s.kv.History(ctx, s.key); herr == nil && len(hist) > 0 {
			s.log.Warn("lease record was deleted or purged: learning as after an unknown predecessor")
			return ledger.Prior{Kind: ledger.PriorMissing}, nil
		}
		if part.changedAt > 0 {
			return s.repartitionedPrior(ctx, "no lease record for this partition, and the node's number of lease partitions changed")
		}
	}
	if s.opts.PriorLeader != nil {
		had, err := s.opts.PriorLeader(ctx)
		if err != nil {
			return ledger.Prior{}, fmt.Errorf("coordinator: read the node's election history: %w", err)
		}
		if had {
			s.log.Warn("no lease record, but the node has had a leader: learning as after an unknown predecessor")
			return ledger.Prior{Kind: ledger.PriorMissing}, nil
		}
	}
	s.log.Info("no lease record and no earlier leader: new deployment, learning mode skipped")
	return ledger.Prior{Kind: ledger.PriorNew}, nil
}

// previous returns the record revision before rev, if the bucket kept one.
func (s *recordStore) previous(ctx context.Context, rev uint64) *allotpb.LeaseHorizon {
	hist, err := s.kv.History(ctx, s.key)
	if err != nil {
		return nil
	}
	for i := len(hist) - 1; i >= 0; i-- {
		e := hist[i]
		if e.Revision() >= rev || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var h allotpb.LeaseHorizon
		if protojson.Unmarshal(e.Value(), &h) == nil {
			return &h
		}
		return nil
	}
	return nil
}

// termBound returns the highest genuine term, 0 if unknown.
func (s *recordStore) termBound(ctx context.Context) uint64 {
	if s.opts.TermBound == nil {
		return 0
	}
	b, err := s.opts.TermBound(ctx)
	if err != nil {
		s.log.Warn("cannot read the election's last sequence", "err", err)
		return 0
	}
	return b
}

// writeTakeover writes the takeover record with compare-and-set on the
// revision load read, so success proves that read was the latest.
func (s *recordStore) writeTakeover(ctx context.Context, rec *allotpb.LeaseHorizon) error {
	data, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	_, err = s.put(ctx, data)
	return err
}

// encodeRecord writes rec as protojson does, by hand (see
// wire.AppendLeaseRecordJSON), or through protojson for what the hand
// encoder declines.
func encodeRecord(rec *allotpb.LeaseHorizon) ([]byte, error) {
	data, ok := wire.AppendLeaseRecordJSON(nil, rec)
	if !ok {
		var err error
		if data, err = protojson.Marshal(rec); err != nil {
			return nil, fmt.Errorf("encode lease record: %w", err)
		}
	}
	if len(data) > ledger.DefaultMaxRecordBytes {
		return nil, fmt.Errorf("lease record of %d bytes is above the limit of %d", len(data), ledger.DefaultMaxRecordBytes)
	}
	return data, nil
}

// put writes data on our last revision (create when none).
func (s *recordStore) put(ctx context.Context, data []byte) (uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	var rev uint64
	var err error
	if s.rev == 0 {
		rev, err = s.kv.Create(wctx, s.key, data)
	} else {
		rev, err = s.kv.Update(wctx, s.key, data, s.rev)
	}
	if err == nil {
		s.rev = rev
	}
	return rev, err
}

func isMismatch(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// mayBeGone reports an error that a deleted bucket causes.
func mayBeGone(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
}

// write stores a record while serving, recovering what can be recovered:
// a deleted record or bucket is written again, an edited one overwritten,
// our own ambiguous earlier write adopted. A newer genuine term's record
// is left alone (errDeposed).
func (s *recordStore) write(ctx context.Context, rec *allotpb.LeaseHorizon) error {
	data, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		_, err = s.put(ctx, data)
		if err == nil || attempt == 3 || ctx.Err() != nil {
			return err
		}
		switch {
		case mayBeGone(err):
			// The bucket may have been deleted: open (or recreate) it.
			octx, cancel := context.WithTimeout(ctx, writeTimeout)
			created, oerr := s.open(octx)
			cancel()
			if oerr != nil {
				return fmt.Errorf("%w (reopening the state bucket: %w)", err, oerr)
			}
			if created {
				s.log.Error("state bucket was missing: created it again and writing the lease record", "bucket", s.opts.StateBucket)
				s.rev = 0
			}
		case isMismatch(err):
			if err := s.reconcile(ctx); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// reconcile reads the stored record after a compare-and-set mismatch and
// decides what our next write overwrites.
func (s *recordStore) reconcile(ctx context.Context) error {
	gctx, cancel := context.WithTimeout(ctx, writeTimeout)
	entry, err := s.kv.Get(gctx, s.key)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.log.Error("lease record was deleted while serving: writing it again")
		s.rev = 0
		return nil
	}
	if err != nil {
		return fmt.Errorf("read back the lease record: %w", err)
	}
	_, err = s.adopt(ctx, entry)
	return err
}

// adopt judges a stored record that is not our last write, and makes our
// next write overwrite it; ours reports that it is one of our earlier
// writes all the same: one whose reply did not come in time, though it
// landed.
func (s *recordStore) adopt(ctx context.Context, entry jetstream.KeyValueEntry) (ours bool, _ error) {
	var h allotpb.LeaseHorizon
	if err := protojson.Unmarshal(entry.Value(), &h); err != nil {
		s.log.Error("lease record replaced by something unreadable: writing ours again", "err", err)
		s.rev = entry.Revision()
		return false, nil
	}
	var bound uint64
	if h.GetTerm() > s.opts.Term {
		bound = s.termBound(ctx)
	}
	v := ledger.Judge(&h, s.opts.Term, s.opts.ServerID, bound)
	switch v {
	case ledger.VerdictNewer:
		return false, fmt.Errorf("%w: lease record has term %d above ours (%d)", errDeposed, h.GetTerm(), s.opts.Term)
	case ledger.VerdictForeign:
		s.log.Error("lease record was overwritten by someone else: writing ours again",
			"record_term", h.GetTerm(), "record_server", h.GetServerId(), "term_bound", bound)
	}
	s.rev = entry.Revision()
	return v == ledger.VerdictOurs, nil
}

// readBack reads the stored record on a goroutine of its own and sends
// what it found on to: a write never waits behind it, nor behind the
// reopening of a bucket the read found gone (which may take a KV
// operation's time-out when JetStream answers slowly). writes is the
// number of writes begun so far, so the writer can tell a read that a
// write overtook.
func (s *recordStore) readBack(to chan<- readResult, writes uint64) {
	kv := s.kv // the writer may reopen the bucket meanwhile
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		gctx, cancel := context.WithTimeout(s.ctx, writeTimeout)
		entry, err := kv.Get(gctx, s.key)
		cancel()
		r := readResult{entry: entry, err: err, writes: writes}
		if mayBeGone(err) {
			octx, cancel := context.WithTimeout(s.ctx, writeTimeout)
			r.kv, r.created, r.openErr = s.openKV(octx)
			cancel()
		}
		to <- r
	}()
}

// readResult is what a read-back found.
type readResult struct {
	entry  jetstream.KeyValueEntry
	err    error
	writes uint64 // writes begun before the read

	// After an error that a deleted bucket causes: the bucket reopened
	// (or the reopening's error), and whether the reopening created it.
	kv      jetstream.KeyValue
	created bool
	openErr error
}

// check judges what a read-back found: whether ours must be written
// again, and whether what was found is someone else's; or errDeposed.
func (s *recordStore) check(ctx context.Context, r readResult) storeResult {
	entry, err := r.entry, r.err
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		s.log.Error("lease record is missing while serving: writing it again")
		s.rev = 0
		return storeResult{rewrite: true, foreign: true}
	case mayBeGone(err):
		if r.openErr != nil {
			return storeResult{err: r.openErr}
		}
		s.kv = r.kv
		if r.created {
			s.log.Error("state bucket was missing: created it again")
			s.rev = 0
			return storeResult{rewrite: true, foreign: true}
		}
		return storeResult{err: err}
	case err != nil:
		return storeResult{err: err}
	case entry.Revision() == s.rev:
		return storeResult{}
	}
	ours, err := s.adopt(ctx, entry)
	if err != nil {
		return storeResult{err: err}
	}
	if ours {
		// The ledger took that write for failed, and grants within the
		// record before it: write the present one over it.
		s.log.Warn("a lease-record write that timed out landed: writing the record again", "revision", entry.Revision())
	}
	return storeResult{rewrite: true, foreign: !ours}
}

// start runs the writer goroutine.
func (s *recordStore) start() {
	s.wg.Add(1)
	go s.run()
}

func (s *recordStore) run() {
	defer s.wg.Done()
	tick := time.NewTicker(checkInterval)
	defer tick.Stop()
	// The read-back runs beside the writes: a write that waited behind it
	// (a KV operation may take up to writeTimeout) could let the recorded
	// expiry of a steadily refreshed resource pass before it lands.
	read := make(chan readResult, 1)
	reading := false
	var writes uint64
	for {
		var res storeResult
		select {
		case <-s.ctx.Done():
			return
		case p := <-s.in:
			writes++
			start := time.Now()
			res = storeResult{p: p, err: s.write(s.ctx, p.Record)}
			res.took = time.Since(start)
		case <-tick.C:
			if !reading {
				reading = true
				s.readBack(read, writes)
			}
			continue
		case r := <-read:
			reading = false
			if r.writes != writes {
				// A write began since: its compare-and-set checked the
				// revision, and the read may predate it.
				continue
			}
			res = s.check(s.ctx, r)
			if !res.rewrite && res.err == nil {
				continue
			}
		}
		select {
		case s.out <- res:
		case <-s.ctx.Done():
			return
		}
	}
}

// submit hands a proposal to the writer; the ledger allows one at a time.
func (s *recordStore) submit(p *ledger.Proposal) {
	select {
	case s.in <- p:
	case <-s.ctx.Done():
	}
}

func (s *recordStore) cancel() {
	if s != nil {
		s.stop()
	}
}

func (s *recordStore) wait() {
	if s != nil {
		s.wg.Wait()
	}
}
