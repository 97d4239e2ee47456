package domainwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// MaxPayload bounds a request body (a refresh listing many holds is the
// largest).
const MaxPayload = 1 << 20

// Request is the body of allot.<node>.domain.request.<ns>.<resource>:
// apply the largest n in [min_copies, copies] hits for domain, or none.
//
// Copies defaults to 1 and MinCopies to Copies (all or nothing) when the
// body leaves them out. A body that names them explicitly is taken at its
// word: "copies":0 is a bad request, "min_copies":0 asks for the largest
// n in [0, copies] (see Validate). In a Go value 0 means left out, as in
// a proto3 scalar: only a decoded body can tell the two apart.
type Request struct {
	Domain    string `json:"domain"`
	Copies    int64  `json:"copies,omitempty"`
	MinCopies int64  `json:"min_copies,omitempty"`
	// ClientID is optional: it names the caller in logs.
	ClientID string `json:"client_id,omitempty"`
	// given records which counts the decoded body named.
	given given
}

// UnmarshalJSON decodes r strictly (unknown fields are errors), noting
// which counts the body names.
func (r *Request) UnmarshalJSON(data []byte) error {
	f, err := decodeCopies(data)
	*r = Request{Domain: f.domain, ClientID: f.clientID, Copies: f.copies, MinCopies: f.minCopies, given: f.given}
	return err
}

// Validate fills the defaults and checks r.
func (r *Request) Validate() error {
	if err := ValidateID("domain", r.Domain); err != nil {
		return err
	}
	if r.ClientID != "" {
		if err := ValidateID("client_id", r.ClientID); err != nil {
			return err
		}
	}
	return validateCopies(&r.Copies, &r.MinCopies, r.given)
}

// RateReply answers a Request, with the context data of the Charon paper
// (section 3.1). Granted is 0 on rejection. Limits not configured are
// Unlimited (-1).
type RateReply struct {
	Granted              int64 `json:"granted"`
	HardLimit            int64 `json:"hard_limit"`
	GlobalLimit          int64 `json:"global_limit"`
	TierLimit            int64 `json:"tier_limit"`
	DomainHitsLastSecond int64 `json:"domain_hits_last_second"`
	GlobalHitsLastSecond int64 `json:"global_hits_last_second"`
	TierHits             int64 `json:"tier_hits"`
	Tier                 int   `json:"tier"`
	Burst                bool  `json:"burst"`
	HardLimited          bool  `json:"hard_limited"`
	GlobalLimited        bool  `json:"global_limited"`
	// Ignored: the namespace ignores its configured limits; granted
	// regardless, still counted.
	Ignored bool `json:"ignored,omitempty"`
	// Unconfigured: the resource is not configured and the namespace
	// allows unconfigured resources with the most permissive limits.
	Unconfigured bool `json:"unconfigured,omitempty"`
	// Fail is the namespace's fail mode (FailShare, FailOpen,
	// FailClosed): what the client does when no service answers.
	Fail string `json:"fail,omitempty"`
}

// Fail modes, the "fail" field of replies: what a client does when no
// domain service answers (docs/domains-client.md, "Failing open").
const (
	// FailShare: copies only within the client's Share; hits as FailOpen.
	FailShare = "share"
	// FailOpen: the call's min copies.
	FailOpen = "open"
	// FailClosed: nothing; the call fails.
	FailClosed = "closed"
)

// Share is what a client may have of a copy-limited resource, held and
// granted to itself together, while no domain service answers: for each
// limit on a domain, its copies under that limit plus an even part of
// the room left among the clients seen there lately. Unlimited (-1)
// where the limit is.
type Share struct {
	// Domain bounds the client's copies of the domain.
	Domain int64 `json:"domain"`
	// Global bounds its copies of the resource, all domains together.
	Global int64 `json:"global"`
	// Groups bound its copies in the pools of the domain's groups now.
	Groups []GroupShare `json:"groups,omitempty"`
}

// GroupShare is a client's share of a domain group's pool.
type GroupShare struct {
	Name  string `json:"name"`
	Share int64  `json:"share"`
}

// Reserve is the body of allot.<node>.domain.reserve.<ns>.<resource>:
// hold the largest n in [min_copies, copies] copies for domain, or none.
// Copies and MinCopies are as in Request.
type Reserve struct {
	Domain    string `json:"domain"`
	Copies    int64  `json:"copies,omitempty"`
	MinCopies int64  `json:"min_copies,omitempty"`
	// ClientID owns the hold: only it may release, refresh or transfer it,
	// and the hold lives as long as it refreshes (Refresh). Required.
	ClientID string `json:"client_id"`
	// given records which counts the decoded body named.
	given given
}

// UnmarshalJSON decodes r strictly (unknown fields are errors), noting
// which counts the body names.
func (r *Reserve) UnmarshalJSON(data []byte) error {
	f, err := decodeCopies(data)
	*r = Reserve{Domain: f.domain, ClientID: f.clientID, Copies: f.copies, MinCopies: f.minCopies, given: f.given}
	return err
}

// Validate fills the defaults and checks r.
func (r *Reserve) Validate() error {
	if err := ValidateID("domain", r.Domain); err != nil {
		return err
	}
	if err := ValidateID("client_id", r.ClientID); err != nil {
		return err
	}
	return validateCopies(&r.Copies, &r.MinCopies, r.given)
}

// GroupHolds is one domain group's pool in a reply.
type GroupHolds struct {
	Name  string `json:"name"`
	Limit int64  `json:"limit"`
	Holds int64  `json:"holds"`
}

// ReserveReply answers a Reserve (and a Seize, for the hold it makes).
// Granted is 0 on rejection, and then HoldID is empty.
type ReserveReply struct {
	Granted int64  `json:"granted"`
	HoldID  string `json:"hold_id"`
	// Seal vouches for the hold to a new leader: the client lists it with
	// the hold in its refreshes (see Hold.Seal).
	Seal string `json:"seal,omitempty"`
	// Groups are the domain's groups when the copies were reserved; the
	// hold releases into them.
	Groups      []string     `json:"groups"`
	DomainLimit int64        `json:"domain_limit"`
	GlobalLimit int64        `json:"global_limit"`
	DomainHolds int64        `json:"domain_holds"`
	GlobalHolds int64        `json:"global_holds"`
	GroupHolds  []GroupHolds `json:"group_holds"`
	// TTLMillis is how long the hold lives without a refresh.
	TTLMillis int64 `json:"ttl_ms"`
	// Learning: a new leader is still learning the holds that exist from
	// their holders' refreshes and grants nothing until then; retry after
	// RetryAfterMillis.
	Learning         bool  `json:"learning,omitempty"`
	RetryAfterMillis int64 `json:"retry_after_ms,omitempty"`
	Ignored          bool  `json:"ignored,omitempty"`
	Unconfigured     bool  `json:"unconfigured,omitempty"`
	// Fail is the namespace's fail mode, and Share the client's share of
	// the domain's limits (not sent by a leader still learning: its
	// counts are not complete yet).
	Fail  string `json:"fail,omitempty"`
	Share *Share `json:"share,omitempty"`
}

// Release is the body of allot.<node>.domain.release.<ns>.<resource>:
// give copies of a hold back (partial releases allowed).
type Release struct {
	ClientID string `json:"client_id"`
	HoldID   string `json:"hold_id"`
	// Copies defaults to every copy the hold has left.
	Copies int64 `json:"copies,omitempty"`
}

// Validate checks r.
func (r *Release) Validate() error {
	if err := ValidateID("client_id", r.ClientID); err != nil {
		return err
	}
	if err := ValidateID("hold_id", r.HoldID); err != nil {
		return err
	}
	if r.Copies < 0 || r.Copies > MaxCopies {
		return badf("copies %d is outside [0, %d] (0: all)", r.Copies, int64(MaxCopies))
	}
	return nil
}

// ReleaseReply answers a Release.
type ReleaseReply struct {
	// Remaining is what the hold still has.
	Remaining int64 `json:"remaining"`
}

// Hold is one hold a client lists in a Refresh.
type Hold struct {
	HoldID string   `json:"hold_id"`
	Domain string   `json:"domain"`
	Groups []string `json:"groups"`
	Copies int64    `json:"copies"`
	// Seal is the seal of the last reply that described the hold (reserve,
	// seize, refresh). A leader that took over recently adopts a hold it
	// has not heard of only with a valid seal, so that nobody can claim
	// copies they were never granted.
	Seal string `json:"seal,omitempty"`
}

// MaxSealLen bounds a Hold's seal.
const MaxSealLen = 128

// Refresh is the body of allot.<node>.domain.refresh.<ns>.<resource>: the
// client's holds of the resource, which live on for another TTL. A new
// leader rebuilds its hold counts from these.
type Refresh struct {
	ClientID string `json:"client_id"`
	Holds    []Hold `json:"holds"`
}

// Validate checks r.
func (r *Refresh) Validate() error {
	if err := ValidateID("client_id", r.ClientID); err != nil {
		return err
	}
	if len(r.Holds) > MaxHoldsPerRefresh {
		return badf("%d holds in one refresh; the limit is %d", len(r.Holds), MaxHoldsPerRefresh)
	}
	seen := make(map[string]bool, len(r.Holds))
	// The field names of the error messages are made only for an error:
	// a refresh of many holds would otherwise format three per hold.
	for i, h := range r.Holds {
		if ValidateID("", h.HoldID) != nil {
			return ValidateID(fmt.Sprintf("holds[%d].hold_id", i), h.HoldID)
		}
		if seen[h.HoldID] {
			return badf("hold %q is listed twice", clip(h.HoldID))
		}
		seen[h.HoldID] = true
		if ValidateID("", h.Domain) != nil {
			return ValidateID(fmt.Sprintf("holds[%d].domain", i), h.Domain)
		}
		for j, g := range h.Groups {
			if ValidateID("", g) != nil {
				return ValidateID(fmt.Sprintf("holds[%d].groups[%d]", i, j), g)
			}
		}
		if h.Copies < 1 || h.Copies > MaxCopies {
			return badf("holds[%d].copies %d is outside [1, %d]", i, h.Copies, int64(MaxCopies))
		}
		if len(h.Seal) > MaxSealLen {
			return badf("holds[%d].seal is %d bytes; a seal has at most %d", i, len(h.Seal), MaxSealLen)
		}
	}
	return nil
}

// RefreshReply answers a Refresh.
type RefreshReply struct {
	TTLMillis int64 `json:"ttl_ms"`
	// Lost lists holds of the refresh the server no longer has (they
	// expired, or were released); their copies are no longer held.
	Lost []string `json:"lost"`
	// Seals are the holds' new seals, by hold id: the client lists each
	// with its hold from now on.
	Seals map[string]string `json:"seals,omitempty"`
	// Fail is the namespace's fail mode, and Shares the client's share
	// of each listed domain's limits, by domain (not sent while
	// learning).
	Fail   string           `json:"fail,omitempty"`
	Shares map[string]Share `json:"shares,omitempty"`
}

// Transfer is the body of allot.<node>.domain.transfer.<ns>.<resource>:
// move copies of a hold into a staging area for ttl.
type Transfer struct {
	ClientID string `json:"client_id"`
	HoldID   string `json:"hold_id"`
	// Copies defaults to every copy the hold has left.
	Copies int64 `json:"copies,omitempty"`
	// TTL is a Go duration ("30s"), in (0, 24h]; default 30s.
	TTL string `json:"ttl,omitempty"`
}

// DefaultTransferTTL is a Transfer's ttl when none is given.
const DefaultTransferTTL = 30 * time.Second

// Validate checks r and returns its ttl.
func (r *Transfer) Validate() (time.Duration, error) {
	if err := ValidateID("client_id", r.ClientID); err != nil {
		return 0, err
	}
	if err := ValidateID("hold_id", r.HoldID); err != nil {
		return 0, err
	}
	if r.Copies < 0 || r.Copies > MaxCopies {
		return 0, badf("copies %d is outside [0, %d] (0: all)", r.Copies, int64(MaxCopies))
	}
	if r.TTL == "" {
		return DefaultTransferTTL, nil
	}
	ttl, err := time.ParseDuration(r.TTL)
	if err != nil || ttl <= 0 || ttl > MaxTransferTTL {
		return 0, badf("ttl %q is not a duration in (0, %v]", clip(r.TTL), MaxTransferTTL)
	}
	return ttl, nil
}

// TransferReply answers a Transfer.
type TransferReply struct {
	// TransferID names the staged copies for Seize: "<ns>.<resource>.<id>",
	// so that a seizer knows the subject to send it to.
	TransferID string `json:"transfer_id"`
	// Remaining is what the hold still has.
	Remaining int64 `json:"remaining"`
}

// Seize is the body of allot.<node>.domain.seize.<ns>.<resource>: claim
// staged copies as a new hold of ClientID.
type Seize struct {
	ClientID   string `json:"client_id"`
	TransferID string `json:"transfer_id"`
}

// Validate checks r.
func (r *Seize) Validate() error {
	if err := ValidateID("client_id", r.ClientID); err != nil {
		return err
	}
	return ValidateID("transfer_id", r.TransferID)
}

// SeizeReply answers a Seize: the new hold, with what a client needs to
// treat it as if it had reserved it.
type SeizeReply struct {
	HoldID    string   `json:"hold_id"`
	Seal      string   `json:"seal,omitempty"`
	Namespace string   `json:"namespace"`
	Resource  string   `json:"resource"`
	Domain    string   `json:"domain"`
	Groups    []string `json:"groups"`
	Copies    int64    `json:"copies"`
	TTLMillis int64    `json:"ttl_ms"`
	// Fail and Share are as in ReserveReply.
	Fail  string `json:"fail,omitempty"`
	Share *Share `json:"share,omitempty"`
}

// TransferResource returns the namespace and resource a transfer id
// names.
func TransferResource(transferID string) (namespace, resource string, err error) {
	if err := ValidateID("transfer_id", transferID); err != nil {
		return "", "", err
	}
	var rest string
	var ok bool
	namespace, rest, ok = cut(transferID)
	if ok {
		resource, _, ok = cut(rest)
	}
	if !ok {
		return "", "", badf("transfer_id %q is not <namespace>.<resource>.<id>", clip(transferID))
	}
	if err := ValidateName("namespace", namespace); err != nil {
		return "", "", err
	}
	if err := ValidateName("resource", resource); err != nil {
		return "", "", err
	}
	return namespace, resource, nil
}

func cut(s string) (before, after string, ok bool) { return strings.Cut(s, ".") }

// ErrorReply is the body of an error reply; its headers are those of a
// NATS micro error (Nats-Service-Error-Code, Nats-Service-Error).
type ErrorReply struct {
	Code  int    `json:"code"`
	Error string `json:"error"`
	// RetryAfterMillis, on an overloaded service's 503 or 429, is how
	// long to wait before sending again (also in the Allot-Retry-After
	// header).
	RetryAfterMillis int64 `json:"retry_after_ms,omitempty"`
}

// Decode decodes a JSON body into v strictly: unknown fields, trailing
// data and bodies above MaxPayload are errors wrapping ErrBadRequest.
func Decode(data []byte, v any) error {
	if len(data) > MaxPayload {
		return badf("body of %d bytes; the limit is %d", len(data), MaxPayload)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	if err := decodeStrict(data, v); err != nil {
		return badf("invalid JSON: %v", err)
	}
	return nil
}

// decodeCopies decodes a request or reserve body strictly, noting which
// counts it names (pointers tell a count left out, or null, from a 0).
func decodeCopies(data []byte) (copiesFields, error) {
	var w struct {
		Domain    string `json:"domain"`
		Copies    *int64 `json:"copies"`
		MinCopies *int64 `json:"min_copies"`
		ClientID  string `json:"client_id"`
	}
	if err := decodeStrict(data, &w); err != nil {
		return copiesFields{}, err
	}
	f := copiesFields{domain: w.Domain, clientID: w.ClientID}
	if w.Copies != nil {
		f.copies, f.given = *w.Copies, f.given|givenCopies
	}
	if w.MinCopies != nil {
		f.minCopies, f.given = *w.MinCopies, f.given|givenMinCopies
	}
	return f, nil
}

// decodeStrict decodes one JSON value into v: unknown fields, a field
// named twice in one object and data after it are errors. A type's
// UnmarshalJSON uses it too, as the strict decoder's options do not reach
// into it.
func decodeStrict(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("data after the object")
	}
	if k, ok := duplicateKey(data); ok {
		return fmt.Errorf("duplicate field %q", k)
	}
	return nil
}

// duplicateKey returns a key that one object of data (a valid JSON
// value) names twice, as encoding/json matches names: ignoring case.
// encoding/json would keep the last, so a body with "domain" twice
// could be read as one domain by a proxy and another by the server; the
// other subjects' protojson refuses it too. Called once the value
// decoded without unknown fields, so each object holds few keys.
func duplicateKey(data []byte) (string, bool) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	// frame is an open object (keys non-nil once it has any, isObj) or
	// array; key says the object's next token is a key.
	type frame struct {
		isObj, key bool
		keys       []string
	}
	var stack []frame
	for {
		tok, err := d.Token()
		if err != nil {
			return "", false
		}
		if n := len(stack); n > 0 && stack[n-1].isObj && stack[n-1].key {
			if k, ok := tok.(string); ok {
				for _, seen := range stack[n-1].keys {
					if strings.EqualFold(seen, k) {
						return k, true
					}
				}
				stack[n-1].keys = append(stack[n-1].keys, k)
				stack[n-1].key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{isObj: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object's next token is a key.
		if len(stack) == 0 {
			return "", false
		}
		if top := &stack[len(stack)-1]; top.isObj {
			top.key = true
		}
	}
}
