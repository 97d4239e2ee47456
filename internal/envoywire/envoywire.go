// Package envoywire holds the wire contract between allot's Envoy rate
// limit front ends (the gRPC services of `allot up|coordinator
// --rls-addr` and `allot agent --rls-addr`) and the quota partitions that
// keep the window counters: the subjects, how a domain is routed to its
// partition, and the validation of the count messages. Both sides import
// it, so they cannot drift apart.
//
//	nats req allot.root.envoy.count.edge '{"domain":"edge","counters":[{"key":"edge_client_a_1700000040","hits":1,"expires":1700000100}]}'
package envoywire

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Limits of the count messages.
const (
	// MaxDomainLen bounds a domain, in bytes.
	MaxDomainLen = 1024
	// MaxKeyLen bounds a counter key, in bytes.
	MaxKeyLen = 8192
	// MaxCounters bounds the counters of one request: a ShouldRateLimit
	// request has one per descriptor.
	MaxCounters = 1000
	// MaxRequest bounds a count request's payload, either encoding: a
	// quarter below NATS's default max_payload, so that it holds on a
	// default server.
	MaxRequest = 768 << 10
	// maxTokenLen bounds a domain used as its own subject token.
	maxTokenLen = 64
)

// Error codes, in the Nats-Service-Error-Code header of an error reply.
const (
	CodeBadRequest = 400 // malformed or invalid request
	CodeTooLarge   = 413 // above MaxRequest
	// CodeConflict: an addition would take a counter past 2^63-1, as
	// Redis's INCRBY refuses it; nothing was counted.
	CodeConflict = 409
	// CodeTooMany: the partition keeps its most counters and the request
	// would add one.
	CodeTooMany = 429
)

// ErrBadRequest is wrapped by every validation error.
var ErrBadRequest = errors.New("bad request")

// Token is the subject token that routes domain's counters: the domain
// itself when it is 1 to 64 characters of [A-Za-z0-9_-], else "h" and
// the 16 hex digits of its FNV-1a 64 hash. Only routing depends on it:
// two domains sharing a token share a partition, never a counter (every
// counter key names its domain).
func Token(domain string) string {
	if len(domain) > 0 && len(domain) <= maxTokenLen && plainToken(domain) {
		return domain
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(domain))
	return "h" + fmt.Sprintf("%016x", h.Sum64())
}

func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CountSubject is allot.<node>.envoy.count.<Token(domain)>, where the
// counters of domain are counted.
func CountSubject(node, domain string) string {
	return subjects.EnvoyCountSubject(node, Token(domain))
}

// PartitionSubject is the prefix partition i subscribes to with ".>":
// mapped subjects arrive as allot.<node>.envoy.p.<i>.count.<token>.
func PartitionSubject(node string, i int) string {
	return subjects.EnvoyPartition(node, i)
}

// ElectionKey is the election key of a node's Envoy partition i:
// <node>.envoy.<i>.
func ElectionKey(node string, i int) string { return subjects.EnvoyElectionKey(node, i) }

// Mappings returns the NATS subject mapping (source → destination) that
// routes node's count subjects to n partitions by the domain token
// (nats-server's partition(n,1)), so that a domain's counters live in one
// leader's memory. n = 1 needs none: partition 0 also subscribes to the
// count subjects themselves.
func Mappings(node string, n int) map[string]string {
	return subjects.EnvoyMappings(node, n)
}

// Partition is the partition of n that the mapping routes domain's
// counters to: nats-server's partition(n,1) of the token, the FNV-1a 32
// hash of the token modulo n. A front end beside the partition's leader
// answers in process with it.
func Partition(domain string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(Token(domain)))
	return int(h.Sum32() % uint32(n))
}

// Decode decodes a count request in encoding enc and validates it; the
// subject's token must be the domain's. Errors wrap ErrBadRequest, or
// wire.ErrTooLarge for a payload above MaxRequest.
func Decode(enc wire.Encoding, data []byte, token string, req *allotpb.EnvoyCountRequest) error {
	if len(data) > MaxRequest {
		return fmt.Errorf("%w: the request is %d bytes; the limit is %d", wire.ErrTooLarge, len(data), MaxRequest)
	}
	if err := wire.Unmarshal(enc, data, req); err != nil {
		return fmt.Errorf("%w: %s", ErrBadRequest, strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": "))
	}
	if enc == wire.Protobuf {
		if err := strict(req); err != nil {
			return err
		}
	}
	if err := Validate(req); err != nil {
		return err
	}
	if t := Token(req.GetDomain()); t != token {
		return fmt.Errorf("%w: domain %q is counted on token %q, not %q: send it to %s", ErrBadRequest, req.GetDomain(), t, token, CountSubject("<node>", req.GetDomain()))
	}
	return nil
}

// strict refuses unknown fields in a binary request, as protojson does.
func strict(req *allotpb.EnvoyCountRequest) error {
	if len(req.ProtoReflect().GetUnknown()) > 0 {
		return fmt.Errorf("%w: EnvoyCountRequest has a field this version does not know", ErrBadRequest)
	}
	for i, c := range req.GetCounters() {
		if len(c.ProtoReflect().GetUnknown()) > 0 {
			return fmt.Errorf("%w: counters[%d] has a field this version does not know", ErrBadRequest, i)
		}
	}
	return nil
}

// Validate checks a count request: a domain of 1 to MaxDomainLen bytes of
// UTF-8, 1 to MaxCounters counters, each with a key of 1 to MaxKeyLen
// bytes, hits at most 2^63-1 (0 when read_only) and a positive expiry.
func Validate(req *allotpb.EnvoyCountRequest) error {
	d := req.GetDomain()
	switch {
	case d == "":
		return fmt.Errorf("%w: domain is empty", ErrBadRequest)
	case len(d) > MaxDomainLen:
		return fmt.Errorf("%w: domain is %d bytes; the limit is %d", ErrBadRequest, len(d), MaxDomainLen)
	case !utf8.ValidString(d):
		return fmt.Errorf("%w: domain is not UTF-8", ErrBadRequest)
	}
	cs := req.GetCounters()
	if len(cs) == 0 || len(cs) > MaxCounters {
		return fmt.Errorf("%w: %d counters; want 1 to %d", ErrBadRequest, len(cs), MaxCounters)
	}
	for i, c := range cs {
		switch {
		case c.GetKey() == "" || len(c.GetKey()) > MaxKeyLen:
			return fmt.Errorf("%w: counters[%d].key is %d bytes; want 1 to %d", ErrBadRequest, i, len(c.GetKey()), MaxKeyLen)
		case c.GetHits() > math.MaxInt64:
			return fmt.Errorf("%w: counters[%d].hits %d is above 2^63-1", ErrBadRequest, i, c.GetHits())
		case req.GetReadOnly() && c.GetHits() != 0:
			return fmt.Errorf("%w: counters[%d].hits is %d in a read_only request", ErrBadRequest, i, c.GetHits())
		case c.GetExpires() <= 0:
			return fmt.Errorf("%w: counters[%d].expires %d: want the window's end in Unix seconds", ErrBadRequest, i, c.GetExpires())
		}
	}
	return nil
}
