package domainserver

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/sources"
)

// resource is the state of one (namespace, resource): its decision core,
// and the configuration it was last given.
type resource struct {
	ns, name string
	kind     domainlimit.Kind
	rate     *domainlimit.Rate
	copies   *domainlimit.Copies
	// holders follows copies's holds by client, for the shares replies
	// tell clients (fail-open within bounds).
	holders *domainlimit.Holders
	// keys finds the holdKeys of the resource's holds by client and
	// domain (holdStore.keyFor); nil when it has none.
	keys map[string]uint32
	// src is the namespace configuration the spec came from, and
	// permissive whether the most permissive spec is in force (the
	// resource is unconfigured, or its namespace ignores its limits).
	src          *domainlimit.Namespace
	permissive   bool
	unconfigured bool
}

// transfer is copies staged by a transfer, waiting to be seized; or,
// once seized (holdID set), the record that answers a retry of the seize
// with the same hold until one hold TTL after it.
type transfer struct {
	id      string
	res     *resource // nil for a seized record a predecessor wrote
	domain  string
	groups  []string
	copies  int64
	expires time.Time
	// seizedBy and holdID name the hold the copies became. The record is
	// dropped once that hold is gone (dropSeizeRecord).
	seizedBy, holdID string
}

// staged reports whether t still holds its copies, waiting for a seize.
func (t *transfer) staged() bool { return t.holdID == "" }

// errNoConfig is a namespace without configuration.
var errNoConfig = errors.New("not configured")

// resolve returns the state of ns/name for kind, creating it on first use
// and handing it a changed configuration. Called with s.mu held.
func (s *Server) resolve(ns, name string, kind domainlimit.Kind) (*resource, error) {
	cfg := sources.CurrentDomains(s.opts.Config)
	nsc := cfg[ns]
	// The key is made in place: a lookup by string(key) allocates nothing.
	var buf [64]byte
	key := append(append(append(buf[:0], ns...), '/'), name...)
	r := s.resources[string(key)]
	if r != nil && r.src == nsc && nsc != nil {
		if r.kind != kind {
			return nil, fmt.Errorf("%w: %s:%s is a %s resource", domainlimit.ErrWrongKind, ns, name, r.kind)
		}
		return r, nil
	}
	if nsc == nil {
		return nil, fmt.Errorf("%w: namespace %q has no configuration (domains.%s in the configuration bucket)", errNoConfig, ns, ns)
	}
	spec, err := nsc.Resolve(name, kind)
	if err != nil {
		return nil, err
	}
	_, configured := nsc.Resources[name]
	unconfigured, permissive := !configured, spec.Permissive
	if r != nil && r.kind != kind {
		// The resource lives on with its holds under its old kind until
		// they are gone; a request of the new kind waits for that.
		return nil, fmt.Errorf("%w: %s:%s still has %s state", domainlimit.ErrWrongKind, ns, name, r.kind)
	}
	rateSpec, copySpec := spec.Rate, spec.Copies
	switch {
	case r == nil && kind == domainlimit.KindRate:
		r = &resource{ns: ns, name: name, kind: kind}
		r.rate, err = domainlimit.NewRate(rateSpec)
	case r == nil:
		r = &resource{ns: ns, name: name, kind: kind, holders: domainlimit.NewHolders(s.opts.HoldTTL)}
		r.copies, err = domainlimit.NewCopies(copySpec)
	case kind == domainlimit.KindRate:
		err = r.rate.SetSpec(rateSpec)
	default:
		err = r.copies.SetSpec(copySpec)
	}
	if err != nil {
		// The configuration was validated when it was read: a failure here
		// is a bug, and the old state stays.
		return nil, fmt.Errorf("configuration of %s:%s: %w", ns, name, err)
	}
	r.src, r.permissive, r.unconfigured = nsc, permissive, unconfigured
	s.resources[string(key)] = r
	return r, nil
}

// idEncoding writes ids in lower-case base32: subject- and key-safe.
// idEncoding is never modified: an Encoding is immutable once made.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns 20 random characters for a hold or transfer id.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	var out [20]byte
	idEncoding.Encode(out[:], b[:])
	return string(out[:])
}

// learning reports whether the server is still rebuilding holds, and for
// how much longer.
func (s *Server) learning(now time.Time) (bool, time.Duration) {
	if s.opts.LearnUntil.IsZero() || !now.Before(s.opts.LearnUntil) {
		return false, 0
	}
	return true, s.opts.LearnUntil.Sub(now)
}

// dropHold releases n copies of h in the core and forgets h once empty.
// Called with s.mu held.
func (s *Server) dropHold(h *hold, n int64) error {
	k := s.holds.key(h)
	if err := k.res.copies.Release(k.domain, k.groups, n); err != nil {
		return err
	}
	s.unhold(h, n)
	h.copies -= n
	if h.copies == 0 {
		s.forgetHold(h)
	}
	return nil
}

// unhold records that h's client no longer holds n of h's copies (they
// are released or staged). Called with s.mu held.
func (s *Server) unhold(h *hold, n int64) {
	k := s.holds.key(h)
	if err := k.res.holders.Remove(k.clientID, k.domain, k.groups, n); err != nil {
		s.log.Error("the holders by client are out of step with the holds", "hold", s.holds.id(h), "err", err)
	}
}

// addHold files a new hold of copies that expires one TTL from now, under
// id, or an id of its own if id is empty. Every hold's expiry is its last
// refresh plus the same TTL, so appending keeps the store's expiry order
// and a sweep reads only what expired. Called with s.mu held.
func (s *Server) addHold(id, clientID string, r *resource, domain string, groups []string, copies int64, now time.Time) *hold {
	h := s.fileHold(id, clientID, r, domain, groups, copies, now)
	r.holders.Add(clientID, domain, groups, copies, s.nanos(now))
	return h
}

// fileHold is addHold without the holders by client, which the caller
// updates. Called with s.mu held.
func (s *Server) fileHold(id, clientID string, r *resource, domain string, groups []string, copies int64, now time.Time) *hold {
	h := s.holds.add(id, clientID, r, domain, groups)
	h.copies, h.expires = copies, s.clock(now)+s.opts.HoldTTL
	return h
}

// touchHold extends a refreshed hold by one TTL. Called with s.mu held.
func (s *Server) touchHold(h *hold, now time.Time) {
	h.expires = s.clock(now) + s.opts.HoldTTL
	s.holds.moveToBack(h)
}

// clock is now as an offset from the server's epoch (monotonic when both
// are readings of time.Now).
func (s *Server) clock(now time.Time) time.Duration { return now.Sub(s.epoch) }

// nanos is clock in nanoseconds, the time the decision cores (rate
// windows, holders seen) take: monotonic, so that a step of the wall
// clock neither ends windows early nor forgets the clients seen.
func (s *Server) nanos(now time.Time) int64 { return int64(s.clock(now)) }

// forgetHold drops an empty hold. While learning it remembers the id, so
// that a refresh listing it again with its seal cannot bring the copies
// back (seal.go). Called with s.mu held.
func (s *Server) forgetHold(h *hold) {
	var id string
	learning := false
	if !s.opts.LearnUntil.IsZero() { // else never learning: no clock reading needed
		learning, _ = s.learning(s.opts.Now())
	}
	if learning || len(s.seized) > 0 {
		id = s.holds.id(h) // made only when needed: holds keep no id string
	}
	var ended string
	if learning {
		k := s.holds.key(h)
		ended = endedKey(k.res.ns, k.res.name, k.clientID, id)
	}
	s.holds.remove(h)
	if id != "" {
		s.dropSeizeRecord(id)
	}
	if learning {
		s.ended[ended] = struct{}{}
	}
}

// maxNames bounds Server.kept; past it the kept names start afresh.
const maxNames = 1 << 14

// name returns a string of b's bytes, the one kept for them if there is
// one: holds of the same client and domain share their strings, and a
// request naming them allocates none. Called with s.mu held.
func (s *Server) name(b []byte) string {
	if v, ok := s.kept[string(b)]; ok {
		return v
	}
	if len(s.kept) >= maxNames || s.kept == nil {
		s.kept = make(map[string]string)
	}
	v := string(b)
	s.kept[v] = v
	return v
}

// maxEnded bounds Server.ended: a learning leader refuses (503) a release
// of a hold it has not heard of beyond it, rather than grow without bound.
const maxEnded = 1 << 16

// endedKey is a hold's key in Server.ended: a release naming someone
// else's hold id does not keep its owner's hold from being adopted.
func endedKey(ns, name, clientID, holdID string) string {
	return ns + "\x00" + name + "\x00" + clientID + "\x00" + holdID
}

// dropSeizeRecord drops the seize record of a hold that is gone
// (released, expired, transferred away), from the state bucket too: a
// retry of the seize is then answered 404, and a new leader still
// learning cannot make the hold again from the record. Called with s.mu
// held.
func (s *Server) dropSeizeRecord(holdID string) {
	t := s.seized[holdID]
	if t == nil {
		return
	}
	delete(s.seized, holdID)
	if s.transfers[t.id] != t {
		return
	}
	delete(s.transfers, t.id)
	if err := s.saveTransfers(); err != nil {
		// This leader forgets it all the same; only a successor that reads
		// the key could still make the hold again while it learns.
		s.log.Warn("dropping a seize record from the state bucket", "transfer", t.id, "hold", holdID, "err", err)
	}
}

// sweepChunk is how many expired holds a sweep drops per hold of the
// lock: requests wait at most that long for a sweep, not for all the
// holds that expired since the last one.
const sweepChunk = 256

// expire releases holds and transfers past their expiry and forgets idle
// rate domains and unused resources.
func (s *Server) expire(now time.Time) {
	for done := false; !done; {
		done = s.expireHolds(now)
	}
	s.mu.Lock()
	s.expireTransfers(now)
	if learning, _ := s.learning(now); !learning && len(s.ended) > 0 {
		clear(s.ended) // nothing is adopted any more
	}
	// A copy resource with nothing held has no hold or transfer left
	// (both count in Global); it is kept while clients it told a share
	// still count in the others' shares.
	for key, r := range s.resources {
		if r.holders != nil {
			r.holders.Sweep(s.nanos(now))
		}
		if r.rate != nil && r.rate.Sweep(s.nanos(now)) == 0 || r.copies != nil && r.copies.Global() == 0 && r.holders.Empty() {
			delete(s.resources, key)
		}
	}
	s.shrink()
	s.mu.Unlock()
}

// expireHolds drops up to sweepChunk holds past their expiry at now and
// reports whether it is done (no expired hold is left).
func (s *Server) expireHolds(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := s.clock(now)
	debug := s.log.Enabled(context.Background(), slog.LevelDebug)
	for range sweepChunk {
		h := s.holds.first()
		if h == nil || at <= h.expires {
			return true
		}
		if debug {
			k := s.holds.key(h)
			s.log.Debug("hold expired: its client stopped refreshing it", "hold", s.holds.id(h), "client_id", k.clientID,
				"resource", k.res.ns+":"+k.res.name, "domain", k.domain)
		}
		if err := s.dropHold(h, h.copies); err != nil {
			s.log.Error("releasing an expired hold", "hold", s.holds.id(h), "err", err)
			s.unhold(h, h.copies)
			s.forgetHold(h)
		}
		s.counts.Expired++
	}
	return false
}

// shrink drops the kept names once no hold uses them (the holds' index
// gives its room back by itself once empty): memory follows the live
// holds. Called with s.mu held.
func (s *Server) shrink() {
	if s.holds.len() == 0 {
		s.kept = nil
	}
}
