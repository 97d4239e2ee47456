package domainserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/statekv"
	"github.com/allot/allot/internal/subjects"
)

// MaxTransfers bounds the staged transfers (and seize records) of one
// partition. They are kept together in one state-bucket key, which must
// also fit in one message: a transfer that would make it larger than the
// connection's max_payload is refused (errStateFull).
const MaxTransfers = 4096

// storedTransfer is a transfer as the state bucket keeps it.
type storedTransfer struct {
	ID        string    `json:"id"`
	Namespace string    `json:"namespace"`
	Resource  string    `json:"resource"`
	Domain    string    `json:"domain"`
	Groups    []string  `json:"groups"`
	Copies    int64     `json:"copies"`
	Expires   time.Time `json:"expires"`
	// SeizedBy and HoldID are set once the transfer is seized: the
	// record then answers a retry of the seize until Expires.
	SeizedBy string `json:"seized_by,omitempty"`
	HoldID   string `json:"hold_id,omitempty"`
}

// stateSlack is room left under max_payload for what a KV put adds.
const stateSlack = 1024

// errStateFull is a transfers key that would not fit in one message.
var errStateFull = errors.New("the partition's transfers key is full")

// transfersKey is the state bucket key that holds the partition's staged
// transfers. One key, read with a plain get, needs no consumer: the
// coordinators' permissions (deploy/nats/secure) allow gets and puts of
// allot_state only.
func (s *Server) transfersKey() string {
	return subjects.DomainTransfersKey(s.opts.Node, s.opts.Partition)
}

// openState opens the state bucket, creating it as the coordinators do
// if this server reaches it first.
func (s *Server) openState(ctx context.Context) (jetstream.KeyValue, error) {
	if s.kv != nil {
		return s.kv, nil
	}
	kv, _, err := statekv.Open(ctx, s.opts.JetStream, s.opts.StateBucket, s.opts.StateReplicas, s.log)
	if err != nil {
		return nil, fmt.Errorf("domainserver: %w", err)
	}
	s.kv = kv
	return kv, nil
}

// loadTransfers adopts the staged transfers a predecessor wrote: their
// copies count as held until seized or expired. It first claims the key
// by writing it back on the revision read, so that a write of a
// predecessor that has not noticed it was deposed fails from then on.
func (s *Server) loadTransfers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := s.openState(ctx)
	if err != nil {
		return err
	}
	var value []byte
	for attempt := 0; ; attempt++ {
		var e jetstream.KeyValueEntry
		e, err = kv.Get(ctx, s.transfersKey())
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			value, s.rev = []byte("[]"), 0
		case err != nil:
			return fmt.Errorf("domainserver: read the staged transfers: %w", err)
		default:
			value, s.rev = e.Value(), e.Revision()
		}
		s.mu.Lock()
		err = s.putTransfers(ctx, kv, value)
		s.mu.Unlock()
		if err == nil {
			break
		}
		if !isMismatch(err) || attempt == 2 {
			return fmt.Errorf("domainserver: claim the staged transfers: %w", err)
		}
	}
	var stored []storedTransfer
	if err := json.Unmarshal(value, &stored); err != nil {
		// Not written by allot: refusing to serve would not make it valid.
		s.log.Error("the staged transfers in the state bucket are unreadable; starting without them", "key", s.transfersKey(), "err", err)
		return nil
	}
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range stored {
		if !now.Before(st.Expires) {
			continue
		}
		if st.HoldID != "" {
			// The hold is the seizer's: its refreshes bring it back, and
			// the record lets a retry of the seize find it.
			t := &transfer{id: st.ID, domain: st.Domain, groups: st.Groups, copies: st.Copies, expires: st.Expires,
				seizedBy: st.SeizedBy, holdID: st.HoldID}
			s.seized[st.HoldID] = t
			s.stage(t)
			continue
		}
		r, err := s.resolve(st.Namespace, st.Resource, domainlimit.KindCopies)
		if err == nil {
			err = r.copies.Restore(st.Domain, st.Groups, st.Copies)
		}
		if err != nil {
			s.log.Warn("dropping a staged transfer that cannot be restored", "transfer", st.ID, "err", err)
			continue
		}
		s.stage(&transfer{id: st.ID, res: r, domain: st.Domain, groups: st.Groups, copies: st.Copies, expires: st.Expires})
	}
	return nil
}

// stage files t (a staged transfer or a seize record) under its id.
// Called with s.mu held.
func (s *Server) stage(t *transfer) {
	s.transfers[t.id] = t
	if s.transfersDue.IsZero() || t.expires.Before(s.transfersDue) {
		s.transfersDue = t.expires
	}
}

// expireTransfers releases the staged transfers whose ttl has ended by
// now, drops the seize records past theirs, and writes what is left to
// the state bucket. Every operation on copies calls it first, so staged
// copies come back the moment their ttl ends (paper 3.1, transfer), not
// at the sweeper's next round a quarter hold TTL later; it reads nothing
// until the earliest expiry has passed. Called with s.mu held.
func (s *Server) expireTransfers(now time.Time) {
	if s.transfersDue.IsZero() || !now.After(s.transfersDue) {
		return
	}
	var next time.Time
	expired := false
	for id, t := range s.transfers {
		if !now.After(t.expires) {
			if next.IsZero() || t.expires.Before(next) {
				next = t.expires
			}
			continue
		}
		expired = true
		delete(s.transfers, id)
		if !t.staged() {
			// Its copies are the seizer's hold's: a retry is too late now.
			delete(s.seized, t.holdID)
			continue
		}
		if err := t.res.copies.Release(t.domain, t.groups, t.copies); err != nil {
			s.log.Error("releasing an expired transfer", "transfer", id, "err", err)
		}
		s.counts.TransfersExpired++
	}
	s.transfersDue = next
	if expired {
		// A failed write is logged: this leader has let the copies go all
		// the same, and a successor skips what has expired by its clock.
		_ = s.saveTransfers()
	}
}

// saveTransfers writes the staged transfers to the state bucket, if there
// is one. Called with s.mu held, so that writes follow the changes in
// order.
func (s *Server) saveTransfers() error {
	if s.opts.JetStream == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := s.openState(ctx)
	if err != nil {
		return err
	}
	stored := make([]storedTransfer, 0, len(s.transfers))
	for id, t := range s.transfers {
		ns, name, _ := domainwire.TransferResource(id) // valid: the handlers made or checked it
		stored = append(stored, storedTransfer{ID: id, Namespace: ns, Resource: name, Domain: t.domain, Groups: t.groups,
			Copies: t.copies, Expires: t.expires, SeizedBy: t.seizedBy, HoldID: t.holdID})
	}
	b, err := json.Marshal(stored)
	if limit := s.nc.MaxPayload() - stateSlack; err == nil && int64(len(b)) > limit {
		// NATS would refuse the put; nothing is written.
		return fmt.Errorf("%w: the staged transfers take %d bytes; the connection's max_payload allows %d", errStateFull, len(b), limit)
	}
	if err == nil {
		err = s.putTransfers(ctx, kv, b)
	}
	if isMismatch(err) {
		// Another server has written the key since this one read or
		// wrote it: a successor. This one is deposed and goes silent.
		err = fmt.Errorf("the staged transfers were written by another server (a new leader): %w", err)
		s.gate.Fail(err)
	}
	if err != nil {
		s.log.Warn("writing the staged transfers to the state bucket", "err", err)
	}
	return err
}

// putTransfers writes value on the revision this server last read or
// wrote. On a mismatch, a key holding what this server last tried to
// write means that write landed though its answer was lost: it writes
// again on that revision. Called with s.mu held.
func (s *Server) putTransfers(ctx context.Context, kv jetstream.KeyValue, value []byte) error {
	prev := s.written
	s.written = value
	for retried := false; ; retried = true {
		var rev uint64
		var err error
		if s.rev == 0 {
			rev, err = kv.Create(ctx, s.transfersKey(), value)
		} else {
			rev, err = kv.Update(ctx, s.transfersKey(), value, s.rev)
		}
		if err == nil {
			s.rev = rev
			return nil
		}
		if !isMismatch(err) || retried || prev == nil {
			return err
		}
		e, gerr := kv.Get(ctx, s.transfersKey())
		if gerr != nil || !bytes.Equal(e.Value(), prev) {
			return err
		}
		s.rev = e.Revision()
	}
}

// isMismatch reports a compare-and-set that lost: the key changed since.
func isMismatch(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}
