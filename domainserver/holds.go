package domainserver

import (
	"container/list"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"time"

	"github.com/allot/allot/internal/domainlimit"
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
	// src is the namespace configuration the spec came from, and
	// permissive whether the most permissive spec is in force (the
	// resource is unconfigured, or its namespace ignores its limits).
	src          *domainlimit.Namespace
	permissive   bool
	unconfigured bool
}

// hold is copies of a copy-limited resource held by one client.
type hold struct {
	id       string
	clientID string
	res      *resource
	domain   string
	groups   []string
	copies   int64
	expires  time.Time
	// elem is h in Server.byExpiry.
	elem *list.Element
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
	cfg := s.opts.Config.get()
	nsc := cfg[ns]
	key := ns + "/" + name
	r := s.resources[key]
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
	s.resources[key] = r
	return r, nil
}

// idEncoding writes ids in lower-case base32: subject- and key-safe.
// idEncoding is never modified: an Encoding is immutable once made.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns 20 random characters for a hold or transfer id.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return idEncoding.EncodeToString(b[:])
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
	if err := h.res.copies.Release(h.domain, h.groups, n); err != nil {
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
	if err := h.res.holders.Remove(h.clientID, h.domain, h.groups, n); err != nil {
		s.log.Error("the holders by client are out of step with the holds", "hold", h.id, "err", err)
	}
}

// addHold files a new hold that expires one TTL from now. Every hold's
// expiry is its last refresh plus the same TTL, so appending keeps
// byExpiry in expiry order and a sweep reads only what expired. Called
// with s.mu held.
func (s *Server) addHold(h *hold, now time.Time) {
	h.expires = now.Add(s.opts.HoldTTL)
	s.holds[h.id] = h
	h.elem = s.byExpiry.PushBack(h)
	h.res.holders.Add(h.clientID, h.domain, h.groups, h.copies, now)
}

// touchHold extends a refreshed hold by one TTL. Called with s.mu held.
func (s *Server) touchHold(h *hold, now time.Time) {
	h.expires = now.Add(s.opts.HoldTTL)
	s.byExpiry.MoveToBack(h.elem)
}

// forgetHold drops an empty hold. While learning it remembers the id, so
// that a refresh listing it again with its seal cannot bring the copies
// back (seal.go). Called with s.mu held.
func (s *Server) forgetHold(h *hold) {
	delete(s.holds, h.id)
	s.byExpiry.Remove(h.elem)
	s.dropSeizeRecord(h.id)
	if learning, _ := s.learning(s.opts.Now()); learning {
		s.ended[endedKey(h.res.ns, h.res.name, h.clientID, h.id)] = struct{}{}
	}
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

// expire releases holds and transfers past their expiry and forgets idle
// rate domains and unused resources.
func (s *Server) expire(now time.Time) {
	s.mu.Lock()
	for e := s.byExpiry.Front(); e != nil; e = s.byExpiry.Front() {
		h := e.Value.(*hold)
		if !now.After(h.expires) {
			break
		}
		if err := s.dropHold(h, h.copies); err != nil {
			s.log.Error("releasing an expired hold", "hold", h.id, "err", err)
			s.unhold(h, h.copies)
			s.forgetHold(h)
		}
		s.counts.Expired++
		s.log.Debug("hold expired: its client stopped refreshing it", "hold", h.id, "client_id", h.clientID,
			"resource", h.res.ns+":"+h.res.name, "domain", h.domain)
	}
	s.expireTransfers(now)
	if learning, _ := s.learning(now); !learning && len(s.ended) > 0 {
		clear(s.ended) // nothing is adopted any more
	}
	// A copy resource with nothing held has no hold or transfer left
	// (both count in Global); it is kept while clients it told a share
	// still count in the others' shares.
	for key, r := range s.resources {
		if r.holders != nil {
			r.holders.Sweep(now)
		}
		if r.rate != nil && r.rate.Sweep(now) == 0 || r.copies != nil && r.copies.Global() == 0 && r.holders.Empty() {
			delete(s.resources, key)
		}
	}
	s.mu.Unlock()
}
