package domainserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/minio/highwayhash"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/subjects"
)

// Seals. A new leader learns the live holds from their holders' refreshes
// and must not take a client's word for a hold it has not heard of: a
// client could list copies it was never granted. Every reply that
// describes a hold (reserve, seize, refresh) carries a seal, a keyed MAC
// over the hold's identity and copies under a key the node's replicas
// share in the state bucket; a learning leader adopts a listed hold only
// with a seal that verifies, that is not older than Options.SealTTL,
// and that covers at least the copies listed (a client lists fewer after
// a release whose reply it lost).

// SealKeyLen is the length of the key a node's replicas seal holds with.
const SealKeyLen = 32

// sealMACLen is the length of a seal's MAC: 128 bits.
const sealMACLen = highwayhash.Size128

// sealKeyName is the state bucket key of the node's seal key.
func (s *Server) sealKeyName() string { return subjects.DomainSealKey(s.opts.Node) }

// loadSealKey reads the node's seal key from the state bucket, creating
// it if no replica has yet. A key that is not one allot wrote is
// replaced: holds sealed under it are then not adopted by this leader
// (their clients see them lost), which is better than not serving.
func (s *Server) loadSealKey(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := s.openState(ctx)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		e, err := kv.Get(ctx, s.sealKeyName())
		switch {
		case err == nil && len(e.Value()) == SealKeyLen:
			s.sealKey = e.Value()
			return nil
		case err == nil:
			s.log.Error("the seal key in the state bucket is not one allot wrote; replacing it", "key", s.sealKeyName(), "bytes", len(e.Value()))
			key := newSealKey()
			if _, err = kv.Update(ctx, s.sealKeyName(), key, e.Revision()); err == nil {
				s.sealKey = key
				return nil
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
			key := newSealKey()
			if _, err = kv.Create(ctx, s.sealKeyName(), key); err == nil {
				s.sealKey = key
				return nil
			}
		}
		if !isMismatch(err) || attempt == 2 {
			return fmt.Errorf("domainserver: read the seal key %s: %w", s.sealKeyName(), err)
		}
		// Another replica wrote it meanwhile: read theirs.
	}
}

// newSealKey returns a random seal key.
func newSealKey() []byte {
	k := make([]byte, SealKeyLen)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// seal returns the seal of hold id of k with copies, valid until SealTTL
// from now. Called with s.mu held.
func (s *Server) seal(id string, k *holdKey, copies int64, now time.Time) string {
	var buf [maxSealLen]byte
	return string(s.appendSeal(buf[:0], id, k, copies, now))
}

// maxSealLen is the longest seal: 19 digits of copies, a dot, 20 of
// the expiry (a negative one), a dot, 22 of the MAC.
const maxSealLen = 19 + 1 + 20 + 1 + 22

// appendSeal appends the seal of hold id of k with copies to b. Called
// with s.mu held.
func (s *Server) appendSeal(b []byte, id string, k *holdKey, copies int64, now time.Time) []byte {
	expires := now.Add(s.opts.SealTTL).UnixMilli()
	mac := s.sealMAC(id, k.clientID, k.res.ns, k.res.name, k.domain, k.groups, copies, expires)
	b = strconv.AppendInt(b, copies, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, expires, 10)
	b = append(b, '.')
	return base64.RawURLEncoding.AppendEncode(b, mac[:])
}

// sealInput is the MAC input of a hold's fields, each length-prefixed
// so that no two holds share an input, written into s.macIn. Called with
// s.mu held.
func (s *Server) sealInput(id, clientID, ns, name, domain string, groups []string, copies, expires int64) []byte {
	b := s.macIn[:0]
	field := func(v string) {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	field(id)
	field(clientID)
	field(ns)
	field(name)
	field(domain)
	b = binary.AppendUvarint(b, uint64(len(groups)))
	for _, g := range groups {
		field(g)
	}
	b = binary.AppendVarint(b, copies)
	b = binary.AppendVarint(b, expires)
	s.macIn = b
	return b
}

// sealMAC is the MAC of a hold's fields: HighwayHash-128 under the seal
// key. It was an HMAC-SHA256 (truncated to 128 bits), which cost a fifth
// of a reserve's CPU; HighwayHash is a keyed pseudo-random function made
// to authenticate short-lived messages, which seals are (they expire
// after the seal TTL), and its 128 bits leave a forger who has seen any
// number of seals one chance in 2^128 per guess, each guess a refresh a
// learning leader answers (docs/security.md). Called with s.mu held.
func (s *Server) sealMAC(id, clientID, ns, name, domain string, groups []string, copies, expires int64) [sealMACLen]byte {
	if s.macKey == nil {
		s.macKey = macKey(s.sealKey)
	}
	return highwayhash.Sum128(s.sealInput(id, clientID, ns, name, domain, groups, copies, expires), s.macKey)
}

// macKey is the HighwayHash key of a seal key: the key itself when it has
// the 32 bytes HighwayHash takes (the key allot keeps in the state bucket
// does), else its SHA-256 (Options.SealKey may have another length).
func macKey(sealKey []byte) []byte {
	if len(sealKey) == highwayhash.Size {
		return sealKey
	}
	k := sha256.Sum256(sealKey)
	return k[:]
}

// legacySealMAC is the HMAC-SHA256 seal MAC of earlier versions, checked
// when a seal's MAC is not sealMAC's, so that a leader of this version
// adopts the holds a leader of an earlier one sealed (a rolling upgrade
// loses none). Never written; as a seal expires after the seal TTL, it
// can go once no leader of an earlier version runs. Called with s.mu
// held.
func (s *Server) legacySealMAC(id, clientID, ns, name, domain string, groups []string, copies, expires int64) []byte {
	m := hmac.New(sha256.New, s.sealKey)
	m.Write(s.sealInput(id, clientID, ns, name, domain, groups, copies, expires))
	return m.Sum(nil)[:sealMACLen]
}

// errSeal is a listed hold whose seal does not vouch for it.
var errSeal = errors.New("no valid seal")

// checkSeal reports whether l's seal vouches for it as clientID's hold of
// ns/name at now, and returns the copies it covers. Called with s.mu held.
func (s *Server) checkSeal(l *domainwire.Hold, clientID, ns, name string, now time.Time) (int64, error) {
	if l.Seal == "" {
		return 0, fmt.Errorf("%w: the hold was listed without one", errSeal)
	}
	parts := strings.Split(l.Seal, ".")
	if len(parts) != 3 {
		return 0, fmt.Errorf("%w: malformed seal", errSeal)
	}
	copies, err1 := strconv.ParseInt(parts[0], 10, 64)
	expires, err2 := strconv.ParseInt(parts[1], 10, 64)
	mac, err3 := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, fmt.Errorf("%w: malformed seal: %w", errSeal, err)
	}
	if strconv.FormatInt(copies, 10) != parts[0] || strconv.FormatInt(expires, 10) != parts[1] {
		return 0, fmt.Errorf("%w: malformed seal: numbers not as the server writes them", errSeal)
	}
	want := s.sealMAC(l.HoldID, clientID, ns, name, l.Domain, l.Groups, copies, expires)
	if !hmac.Equal(mac, want[:]) && !hmac.Equal(mac, s.legacySealMAC(l.HoldID, clientID, ns, name, l.Domain, l.Groups, copies, expires)) {
		return 0, fmt.Errorf("%w: the seal was not made for this hold, client and copies", errSeal)
	}
	if now.UnixMilli() > expires {
		return 0, fmt.Errorf("%w: the seal expired at %s", errSeal, time.UnixMilli(expires).UTC().Format(time.RFC3339Nano))
	}
	return copies, nil
}
