package domainwire

import (
	"encoding/binary"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/allot/allot/internal/names"
	"github.com/allot/allot/internal/swar"
)

// The hot path of the domain server is request and reserve. encoding/json
// spends most of a decision's CPU on them, so their common shapes are
// decoded and their replies encoded by hand here. A body the fast
// decoder does not recognize (escapes, other types, unknown or
// differently cased keys) goes to the strict Decode, so both accept and
// refuse the same bodies with the same result; fuzz tests check it, and
// that the encoders write what json.Marshal writes.

// Names makes the strings of a decoded body from its bytes (names.Func):
// a domain, a client id the server has seen.
type Names = names.Func

// DecodeRequest decodes the body of a request into r (not validated).
func DecodeRequest(data []byte, r *Request) error { return DecodeRequestNames(data, r, nil) }

// DecodeRequestNames is DecodeRequest with its strings made by names.
func DecodeRequestNames(data []byte, r *Request, names Names) error {
	f, ok := scanCopies(data, names)
	if !ok {
		return Decode(data, r)
	}
	*r = Request{Domain: f.domain, ClientID: f.clientID, Copies: f.copies, MinCopies: f.minCopies, given: f.given}
	return nil
}

// DecodeReserve decodes the body of a reserve into r (not validated).
func DecodeReserve(data []byte, r *Reserve) error { return DecodeReserveNames(data, r, nil) }

// DecodeReserveNames is DecodeReserve with its strings made by names.
func DecodeReserveNames(data []byte, r *Reserve, names Names) error {
	f, ok := scanCopies(data, names)
	if !ok {
		return Decode(data, r)
	}
	*r = Reserve{Domain: f.domain, ClientID: f.clientID, Copies: f.copies, MinCopies: f.minCopies, given: f.given}
	return nil
}

// DecodeRelease decodes the body of a release into r (not validated),
// with its strings made by names (nil: copied).
func DecodeRelease(data []byte, r *Release, names Names) error {
	var out Release
	ok := scanObject(data, func(key, s []byte, n int64, isStr bool) bool {
		switch {
		case string(key) == "client_id" && isStr:
			out.ClientID = names.Of(s)
		case string(key) == "hold_id" && isStr:
			out.HoldID = string(s) // one hold's: nothing to share
		case string(key) == "copies" && !isStr:
			out.Copies = n
		default:
			return false
		}
		return true
	})
	if !ok {
		*r = Release{}
		return Decode(data, r)
	}
	*r = out
	return nil
}

// copiesFields are the fields Request and Reserve share.
type copiesFields struct {
	domain, clientID  string
	copies, minCopies int64
	given             given
}

// scanCopies reads a request or reserve body of the common shape.
func scanCopies(data []byte, names Names) (copiesFields, bool) {
	var f copiesFields
	ok := scanObject(data, func(key, s []byte, n int64, isStr bool) bool {
		switch {
		case string(key) == "domain" && isStr:
			f.domain = names.Of(s)
		case string(key) == "client_id" && isStr:
			f.clientID = names.Of(s)
		case string(key) == "copies" && !isStr:
			f.copies, f.given = n, f.given|givenCopies
		case string(key) == "min_copies" && !isStr:
			f.minCopies, f.given = n, f.given|givenMinCopies
		default:
			return false
		}
		return true
	})
	return f, ok
}

// scanObject walks a flat JSON object whose values are strings without
// escapes or integers, calling field for each member; it returns false
// (nothing decided) for anything else, when field does, or when a key
// comes twice (the strict decoder refuses it) or past the few the common
// shapes have.
func scanObject(b []byte, field func(key, s []byte, n int64, isStr bool) bool) bool {
	if len(b) > MaxPayload {
		return false
	}
	var seen [6][]byte
	nSeen := 0
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := scanString(b, i)
		if !ok || nSeen == len(seen) {
			return false
		}
		for _, k := range seen[:nSeen] {
			if string(k) == string(key) {
				return false
			}
		}
		seen[nSeen] = key
		nSeen++
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false
		}
		if b[i] == '"' {
			s, j, ok := scanString(b, i)
			if !ok || !field(key, s, 0, true) {
				return false
			}
			i = j
		} else {
			n, j, ok := scanInt(b, i)
			if !ok || !field(key, nil, n, false) {
				return false
			}
			i = j
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads a string at b[i] ('"') with no escapes, no control
// characters and valid UTF-8; it returns its bytes and the index after it.
func scanString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	ascii := true
	j := i + 1
	// Eight bytes at a time up to the first that ends the string, is an
	// escape or a control character, or is not ASCII: the byte loop
	// takes over there (the tests flag none before it).
	for ; j+8 <= len(b); j += 8 {
		x := binary.LittleEndian.Uint64(b[j:])
		if f := swar.NonASCII(x) | swar.Below(x, 0x20) | swar.Zero(x^swar.Lo*'"') | swar.Zero(x^swar.Lo*'\\'); f != 0 {
			j += swar.First(f)
			break
		}
	}
	for ; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !ascii && !utf8.Valid(s) {
				return nil, 0, false
			}
			return s, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, 0, false
}

// scanInt reads a JSON integer (no fraction or exponent) that fits an
// int64.
func scanInt(b []byte, i int) (int64, int, bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	start := j
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == start || b[start] == '0' && j-start > 1 {
		return 0, 0, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, 0, false
	}
	// Digits only: at most 19 of them fit an int64 for sure; more go
	// through ParseInt, which tells whether they fit.
	if j-start <= 18 {
		var n int64
		for _, c := range b[start:j] {
			n = n*10 + int64(c-'0')
		}
		if start > i {
			n = -n
		}
		return n, j, true
	}
	n, err := strconv.ParseInt(string(b[i:j]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return n, j, true
}

// AppendRateReply appends r as json.Marshal writes it.
func AppendRateReply(b []byte, r *RateReply) []byte {
	b = appendIntField(b, `{"granted":`, r.Granted)
	b = appendIntField(b, `,"hard_limit":`, r.HardLimit)
	b = appendIntField(b, `,"global_limit":`, r.GlobalLimit)
	b = appendIntField(b, `,"tier_limit":`, r.TierLimit)
	b = appendIntField(b, `,"domain_hits_last_second":`, r.DomainHitsLastSecond)
	b = appendIntField(b, `,"global_hits_last_second":`, r.GlobalHitsLastSecond)
	b = appendIntField(b, `,"tier_hits":`, r.TierHits)
	b = appendIntField(b, `,"tier":`, int64(r.Tier))
	b = append(b, `,"burst":`...)
	b = strconv.AppendBool(b, r.Burst)
	b = append(b, `,"hard_limited":`...)
	b = strconv.AppendBool(b, r.HardLimited)
	b = append(b, `,"global_limited":`...)
	b = strconv.AppendBool(b, r.GlobalLimited)
	if r.Ignored {
		b = append(b, `,"ignored":true`...)
	}
	if r.Unconfigured {
		b = append(b, `,"unconfigured":true`...)
	}
	if r.Fail != "" {
		b = appendStringField(b, `,"fail":`, r.Fail)
	}
	return append(b, '}')
}

// AppendReserveReply appends r as json.Marshal writes it.
func AppendReserveReply(b []byte, r *ReserveReply) []byte {
	b = appendIntField(b, `{"granted":`, r.Granted)
	b = appendStringField(b, `,"hold_id":`, r.HoldID)
	if r.Seal != "" {
		b = appendStringField(b, `,"seal":`, r.Seal)
	}
	return appendReserveRest(b, r)
}

// AppendReserveReplySealed is AppendReserveReply of r with holdID and
// seal, bytes the caller wrote, for r's HoldID and Seal (which it does
// not read): a server writes a new hold's id and seal without making
// strings of them. Both are written as they are, unchecked: they must be
// Plain (a server's own ids and seals are letters, digits, '.', '-' and
// '_'), which saves a look-up per byte of the 60 written on every reserve.
func AppendReserveReplySealed(b []byte, r *ReserveReply, holdID, seal []byte) []byte {
	b = appendIntField(b, `{"granted":`, r.Granted)
	b = append(append(append(b, `,"hold_id":"`...), holdID...), '"')
	if len(seal) > 0 {
		b = append(append(append(b, `,"seal":"`...), seal...), '"')
	}
	return appendReserveRest(b, r)
}

// Plain reports whether json.Marshal writes s as it is, between quotes.
func Plain[S string | []byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if !plain[s[i]] {
			return false
		}
	}
	return true
}

// appendReserveRest appends r's fields after its hold id and seal, and
// closes it.
func appendReserveRest(b []byte, r *ReserveReply) []byte {
	b = append(b, `,"groups":`...)
	if r.Groups == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, g := range r.Groups {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, g)
		}
		b = append(b, ']')
	}
	b = appendIntField(b, `,"domain_limit":`, r.DomainLimit)
	b = appendIntField(b, `,"global_limit":`, r.GlobalLimit)
	b = appendIntField(b, `,"domain_holds":`, r.DomainHolds)
	b = appendIntField(b, `,"global_holds":`, r.GlobalHolds)
	b = append(b, `,"group_holds":`...)
	if r.GroupHolds == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, g := range r.GroupHolds {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStringField(b, `{"name":`, g.Name)
			b = appendIntField(b, `,"limit":`, g.Limit)
			b = appendIntField(b, `,"holds":`, g.Holds)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendIntField(b, `,"ttl_ms":`, r.TTLMillis)
	if r.Learning {
		b = append(b, `,"learning":true`...)
	}
	if r.RetryAfterMillis != 0 {
		b = appendIntField(b, `,"retry_after_ms":`, r.RetryAfterMillis)
	}
	if r.Ignored {
		b = append(b, `,"ignored":true`...)
	}
	if r.Unconfigured {
		b = append(b, `,"unconfigured":true`...)
	}
	if r.Fail != "" {
		b = appendStringField(b, `,"fail":`, r.Fail)
	}
	if r.Share != nil {
		b = append(b, `,"share":`...)
		b = appendShare(b, r.Share)
	}
	return append(b, '}')
}

// appendIntField appends key (with its leading '{' or ',' and trailing
// ':') and v, as json.Marshal writes them.
func appendIntField(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(b, key...), v, 10)
}

// appendStringField is appendIntField for a string value.
func appendStringField[S string | []byte](b []byte, key string, v S) []byte {
	return appendString(append(b, key...), v)
}

// appendShare appends s as json.Marshal writes it.
func appendShare(b []byte, s *Share) []byte {
	b = appendIntField(b, `{"domain":`, s.Domain)
	b = appendIntField(b, `,"global":`, s.Global)
	if len(s.Groups) > 0 {
		b = append(b, `,"groups":[`...)
		for i, g := range s.Groups {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStringField(b, `{"name":`, g.Name)
			b = appendIntField(b, `,"share":`, g.Share)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// plain has the bytes json.Marshal writes in a string as they are: ASCII
// but control characters, '"', '\\' and the HTML characters '<', '>'
// and '&' it escapes. One table look-up per byte, where the test was
// seven comparisons (reply strings are written on every decision).
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendString appends s as a JSON string: plain ASCII as it is, anything
// that json.Marshal would escape through json.Marshal.
func appendString[S string | []byte](b []byte, s S) []byte {
	if !Plain(s) {
		q, _ := json.Marshal(string(s))
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
