// Package domainwire holds the wire contract of allot's domain limits
// (Charon-style rate-limited and copy-limited resources, see
// docs/domains.md): the subjects and the JSON messages that agents and the
// domain server exchange, and their validation. Both sides import it, so
// they cannot drift apart.
//
// Every message is JSON, so the nats CLI speaks it directly:
//
//	nats req allot.root.domain.request.api.search '{"domain":"acme","copies":1}'
package domainwire

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/swar"
)

// Operations: the fourth token of a domain subject.
const (
	OpRequest  = subjects.DomainRequest  // rate-limited: apply hits
	OpReserve  = subjects.DomainReserve  // copy-limited: take a hold
	OpRelease  = subjects.DomainRelease  // give copies of a hold back
	OpRefresh  = subjects.DomainRefresh  // keep a client's holds alive
	OpTransfer = subjects.DomainTransfer // stage copies of a hold for another process
	OpSeize    = subjects.DomainSeize    // claim staged copies
)

// Ops lists every operation.
var Ops = []string{OpRequest, OpReserve, OpRelease, OpRefresh, OpTransfer, OpSeize}

// Limits of the messages.
const (
	// MaxNameLen bounds a namespace or resource name (a subject token).
	MaxNameLen = 64
	// MaxDomainLen bounds a domain, a group and a client id.
	MaxDomainLen = 256
	// MaxCopies bounds copies, min_copies and every amount.
	MaxCopies = 1_000_000_000_000
	// MaxHoldsPerRefresh bounds the holds one refresh lists.
	MaxHoldsPerRefresh = 10_000
	// MaxHoldTTL is the longest hold ttl a service may have; a client
	// takes a longer one it is told as this.
	MaxHoldTTL = time.Hour
	// MaxRetryAfter is the longest wait a client takes from a service's
	// advice: a longer one is not advice but a bug.
	MaxRetryAfter = time.Minute
	// MaxTransferTTL bounds a transfer's ttl.
	MaxTransferTTL = 24 * time.Hour
	// Unlimited is how a reply writes a limit that is not configured.
	Unlimited int64 = -1
)

// Error codes, in the Nats-Service-Error-Code header of an error reply
// and in ErrorReply.Code.
const (
	CodeBadRequest = 400 // malformed or invalid request
	CodeForbidden  = 403 // the hold belongs to another client, or the namespace is not open to the tenant
	CodeNotFound   = 404 // unknown resource, hold or transfer
	CodeConflict   = 409 // wrong kind of resource, or more copies released than held
	CodeTooMany    = 429 // too many staged transfers
	CodeInternal   = 500
	// CodeUnavailable: a new leader is still learning the holds and has
	// not heard of this one yet; retry after the client's next refresh.
	CodeUnavailable = 503
)

// ErrBadRequest is wrapped by every validation error.
var ErrBadRequest = errors.New("bad request")

// Subject is allot.<node>.domain.<op>.<namespace>.<resource>.
func Subject(node, op, namespace, resource string) string {
	return subjects.Domain(node, op, namespace, resource)
}

// PartitionSubject is the prefix partition i of N > 1 subscribes to with
// ".>": mapped subjects arrive as allot.<node>.domain.p.<i>.<op>.<namespace>.<resource>.
func PartitionSubject(node string, i int) string {
	return subjects.DomainPartition(node, i)
}

// TenantSubject is a domain subject as a tenant's request arrives in the
// allot account through the tenant's service import:
// allot.t.<tenant>.<node>.domain.<op>.<namespace>.<resource>. The tenant
// token is the importing account's name (account_token_position), so it
// cannot be forged.
func TenantSubject(tenant, node, op, namespace, resource string) string {
	return subjects.TenantDomain(tenant, node, op, namespace, resource)
}

// Mappings returns the NATS subject mappings that spread a node's domain
// subjects over n partitions by namespace and resource, so that every
// operation on one resource reaches the same partition; tenants' subjects
// go to the same partition as the plain ones, keeping the tenant token:
// allot.<node>.domain.p.<i>.t.<tenant>.<op>.<namespace>.<resource>. n ≤ 1
// needs none.
func Mappings(node string, n int) map[string]string { return subjects.DomainMappings(node, n) }

// ParseSubject returns the operation, namespace and resource of a domain
// subject in any form (plain, partitioned, a tenant's).
func ParseSubject(subject string) (op, namespace, resource string, err error) {
	_, op, namespace, resource, err = ParseTenantSubject(subject)
	return op, namespace, resource, err
}

// ParseTenantSubject is ParseSubject, and also returns the tenant of a
// tenant's subject (TenantSubject, or its partitioned form), "" for the
// others.
func ParseTenantSubject(subject string) (tenant, op, namespace, resource string, err error) {
	// Tokens cut in one pass over the bytes (no allocation, and no call
	// per token: every decision parses its subject).
	var t [10]string
	n, start, rest := 0, 0, false
	for i := 0; ; i++ {
		// The next dot, eight bytes at a time (swar.Zero flags the first
		// dot of a word exactly), then a byte at a time.
		for ; i+8 <= len(subject); i += 8 {
			if f := swar.Zero(swar.Load(subject, i) ^ swar.Lo*'.'); f != 0 {
				i += swar.First(f)
				break
			}
		}
		for i < len(subject) && subject[i] != '.' {
			i++
		}
		if i >= len(subject) {
			break
		}
		t[n], start = subject[start:i], i+1
		if n++; n == len(t) {
			// Ten tokens and a dot: more only if anything follows it.
			rest = start < len(subject)
			break
		}
	}
	if n < len(t) {
		t[n] = subject[start:]
		n++
	}
	switch {
	case rest:
		// more than 10 tokens
	case t[0] != "allot":
	case n == 8 && t[1] == "t" && t[4] == "domain":
		if t[2] != "" {
			tenant, op, namespace, resource = t[2], t[5], t[6], t[7]
		}
	case n == 10 && t[2] == "domain" && t[3] == "p" && t[5] == "t":
		if t[6] != "" {
			tenant, op, namespace, resource = t[6], t[7], t[8], t[9]
		}
	case n == 6 && t[2] == "domain":
		op, namespace, resource = t[3], t[4], t[5]
	case n == 8 && t[2] == "domain" && t[3] == "p":
		op, namespace, resource = t[5], t[6], t[7]
	}
	if op == "" {
		return "", "", "", "", badf("subject %q is not allot.<node>.domain.<op>.<namespace>.<resource>", clip(subject))
	}
	if err := ValidateName("namespace", namespace); err != nil {
		return "", "", "", "", err
	}
	if err := ValidateName("resource", resource); err != nil {
		return "", "", "", "", err
	}
	return tenant, op, namespace, resource, nil
}

// SplitResource splits "namespace:resource", the form the agent API takes.
func SplitResource(s string) (namespace, resource string, err error) {
	namespace, resource, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", badf("resource %q is not of the form \"namespace:resource\"", clip(s))
	}
	if err := ValidateName("namespace", namespace); err != nil {
		return "", "", err
	}
	if err := ValidateName("resource", resource); err != nil {
		return "", "", err
	}
	return namespace, resource, nil
}

// ValidateName checks a namespace or resource name: 1 to MaxNameLen
// characters of [A-Za-z0-9_-], as it is a subject token.
func ValidateName(what, s string) error {
	if s == "" {
		return badf("%s is empty", what)
	}
	if len(s) > MaxNameLen {
		return badf("%s is %d characters long; the limit is %d", what, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !nameByte[c] {
			return badf("%s %q contains %q; use only letters, digits, '_' and '-'", what, clip(s), string(rune(c)))
		}
	}
	return nil
}

// nameByte has the bytes a name may contain: letters, digits, '_' and
// '-' (one look-up per byte: every decision validates its subject's).
var nameByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	return t
}()

// ValidateID checks a domain, group, client, hold or transfer id: 1 to
// MaxDomainLen bytes of UTF-8 without spaces or control characters. A
// client must check it before encoding: JSON would turn invalid UTF-8
// into U+FFFD, and the service would see another id.
func ValidateID(what, s string) error {
	if s == "" {
		return badf("%s is empty", what)
	}
	if len(s) > MaxDomainLen {
		return badf("%s is %d bytes long; the limit is %d", what, len(s), MaxDomainLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == 0x7f {
			return badf("%s %q contains a space or control character", what, clip(s))
		}
		if c >= utf8.RuneSelf {
			return validateUnicodeID(what, s)
		}
	}
	return nil
}

// validateUnicodeID is ValidateID's check of an id that is not ASCII.
func validateUnicodeID(what, s string) error {
	if !utf8.ValidString(s) {
		return badf("%s %q is not valid UTF-8", what, clip(s))
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return badf("%s %q contains a space or control character (%U)", what, clip(s), r)
		}
	}
	return nil
}

// given records which of copies and min_copies a decoded body named, so
// that an explicit 0 is told from a field left out.
type given uint8

const (
	givenCopies given = 1 << iota
	givenMinCopies
)

// validateCopies fills the defaults of copies (1) and min_copies
// (copies, all or nothing) when they were not given, and checks both.
// An explicit copies of 0 asks for nothing: a bad request. An explicit
// min_copies of 0 is the paper's range [0, copies]: the largest n that
// fits, 0 when none does (which applies nothing, so it decides as 1
// does).
func validateCopies(copies, minCopies *int64, g given) error {
	if *copies == 0 && g&givenCopies == 0 {
		*copies = 1
	}
	if *copies < 1 || *copies > MaxCopies {
		return badf("copies %d is outside [1, %d]", *copies, int64(MaxCopies))
	}
	if *minCopies == 0 && g&givenMinCopies == 0 {
		*minCopies = *copies
	}
	if *minCopies < 0 || *minCopies > *copies {
		return badf("min_copies %d is outside [0, copies = %d]", *minCopies, *copies)
	}
	return nil
}

// Limit writes a limit of the decision core for a reply: not configured
// (math.MaxInt64) is Unlimited.
func Limit(v int64) int64 {
	if v == math.MaxInt64 {
		return Unlimited
	}
	return v
}

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
