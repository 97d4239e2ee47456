package domainserver

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/domainlimit"
)

// resource is the state of one (namespace, resource): its decision core,
// and the configuration it was last given.
type resource struct {
	ns, name string
	kind     domainlimit.Kind
	rate     *domainlimit.Rate
	copies   *domainlimit.Copies
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

// transfer is copies staged by a transfer, waiting to be seized.
type transfer struct {
	id      string
	res     *resource
	domain  string
	groups  []string
	copies  int64
	expires time.Time
}

// errNoConfig is a namespace without configuration.
var errNoConfig = errors.New("not configured")

// resolve returns the state of ns/name for kind, creating it on first use
// and handing it a changed configuration. Called with s.mu held.
func (s *Server) resolve(ns, name string, kind domainlimit.Kind) (*resource, error) {
	cfg := s.opts.Config()
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
		r = &resource{ns: ns, name: name, kind: kind}
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
	h.copies -= n
	if h.copies == 0 {
		s.forgetHold(h)
	}
	return nil
}

// addHold files a new hold that expires one TTL from now. Every hold's
// expiry is its last refresh plus the same TTL, so appending keeps
// byExpiry in expiry order and a sweep reads only what expired. Called
// with s.mu held.
func (s *Server) addHold(h *hold, now time.Time) {
	h.expires = now.Add(s.opts.HoldTTL)
	s.holds[h.id] = h
	h.elem = s.byExpiry.PushBack(h)
}

// touchHold extends a refreshed hold by one TTL. Called with s.mu held.
func (s *Server) touchHold(h *hold, now time.Time) {
	h.expires = now.Add(s.opts.HoldTTL)
	s.byExpiry.MoveToBack(h.elem)
}

// forgetHold drops an empty hold. Called with s.mu held.
func (s *Server) forgetHold(h *hold) {
	delete(s.holds, h.id)
	s.byExpiry.Remove(h.elem)
}

// expire releases holds and transfers past their expiry and forgets idle
// rate domains and unused resources.
func (s *Server) expire(now time.Time) {
	s.mu.Lock()
	var gone []string
	for e := s.byExpiry.Front(); e != nil; e = s.byExpiry.Front() {
		h := e.Value.(*hold)
		if !now.After(h.expires) {
			break
		}
		if err := s.dropHold(h, h.copies); err != nil {
			s.log.Error("releasing an expired hold", "hold", h.id, "err", err)
			s.forgetHold(h)
		}
		s.counts.Expired++
		s.log.Debug("hold expired: its client stopped refreshing it", "hold", h.id, "client_id", h.clientID,
			"resource", h.res.ns+":"+h.res.name, "domain", h.domain)
	}
	for id, t := range s.transfers {
		if now.After(t.expires) {
			if err := t.res.copies.Release(t.domain, t.groups, t.copies); err != nil {
				s.log.Error("releasing an expired transfer", "transfer", id, "err", err)
			}
			delete(s.transfers, id)
			gone = append(gone, id)
			s.counts.TransfersExpired++
		}
	}
	// A copy resource with nothing held has no hold or transfer left
	// (both count in Global).
	for key, r := range s.resources {
		if r.rate != nil && r.rate.Sweep(now) == 0 || r.copies != nil && r.copies.Global() == 0 {
			delete(s.resources, key)
		}
	}
	s.mu.Unlock()
	for _, id := range gone {
		s.deleteTransfer(id)
	}
}

// storedTransfer is a transfer as the state bucket keeps it.
type storedTransfer struct {
	Namespace string    `json:"namespace"`
	Resource  string    `json:"resource"`
	Domain    string    `json:"domain"`
	Groups    []string  `json:"groups"`
	Copies    int64     `json:"copies"`
	Expires   time.Time `json:"expires"`
}

// transferKey is the state bucket key of a transfer: the partition is in
// it, so that a new leader loads only its own.
func (s *Server) transferKey(id string) string {
	return s.opts.Node + ".domain." + strconv.Itoa(s.opts.Partition) + ".transfer." + id
}

// openState opens (or creates) the state bucket.
func (s *Server) openState(ctx context.Context) (jetstream.KeyValue, error) {
	if s.kv != nil {
		return s.kv, nil
	}
	js := s.opts.JetStream
	kv, err := js.KeyValue(ctx, s.opts.StateBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: s.opts.StateBucket,
			Description: "allot coordinator state: lease records per node, staged domain transfers", Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, s.opts.StateBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("domainserver: state bucket %q: %w", s.opts.StateBucket, err)
	}
	s.kv = kv
	return kv, nil
}

// loadTransfers adopts the staged transfers a predecessor wrote: their
// copies count as held until seized or expired.
func (s *Server) loadTransfers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := s.openState(ctx)
	if err != nil {
		return err
	}
	prefix := s.transferKey("")
	lister, err := kv.ListKeysFiltered(ctx, prefix+">")
	if err != nil {
		return fmt.Errorf("domainserver: list transfers: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return fmt.Errorf("domainserver: read transfer %s: %w", k, err)
		}
		var st storedTransfer
		if err := json.Unmarshal(e.Value(), &st); err != nil || !now.Before(st.Expires) {
			_ = kv.Delete(ctx, k)
			continue
		}
		r, err := s.resolve(st.Namespace, st.Resource, domainlimit.KindCopies)
		if err == nil {
			err = r.copies.Restore(st.Domain, st.Groups, st.Copies)
		}
		if err != nil {
			s.log.Warn("dropping a staged transfer that cannot be restored", "key", k, "err", err)
			_ = kv.Delete(ctx, k)
			continue
		}
		id := strings.TrimPrefix(k, prefix)
		s.transfers[st.Namespace+"."+st.Resource+"."+id] = &transfer{id: id, res: r, domain: st.Domain, groups: st.Groups,
			copies: st.Copies, expires: st.Expires}
	}
	return nil
}

// storeTransfer writes t to the state bucket, if there is one.
func (s *Server) storeTransfer(ctx context.Context, t *transfer) error {
	if s.opts.JetStream == nil {
		return nil
	}
	kv, err := s.openState(ctx)
	if err != nil {
		return err
	}
	b, err := json.Marshal(storedTransfer{Namespace: t.res.ns, Resource: t.res.name, Domain: t.domain, Groups: t.groups,
		Copies: t.copies, Expires: t.expires})
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, s.transferKey(t.id), b)
	return err
}

// deleteTransfer removes a seized or expired transfer from the state
// bucket; a failure only leaves a key that a successor drops as expired.
func (s *Server) deleteTransfer(fullID string) {
	if s.opts.JetStream == nil || s.kv == nil {
		return
	}
	id := fullID[strings.LastIndexByte(fullID, '.')+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.kv.Delete(ctx, s.transferKey(id)); err != nil {
		s.log.Warn("deleting a transfer from the state bucket", "transfer", fullID, "err", err)
	}
}
