package wire

import (
	"encoding/binary"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/swar"
	"github.com/allot/allot/proto/allotpb"
)

// The quota take decision is answered for every request, so its request
// is decoded and its reply encoded by hand here. The fast decoder takes
// only the common shape of a JSON request and hands anything else to
// protojson; it never rejects on its own, so both accept and reject the
// same requests (FuzzQuotaTakeFast checks).

// Field numbers of QuotaTakeRequest (proto/quota.proto).
const (
	fieldReqBucket      = 1
	fieldReqTokens      = 2
	fieldReqMaxWait     = 3
	fieldReqClientID    = 4
	fieldReqCriticality = 5
)

// decodeTakeProtoFast decodes a binary QuotaTakeRequest whose fields each
// appear at most once with their own wire type, whose strings are
// printable ASCII, whose criticality is a known value and whose max_wait
// holds only seconds and nanos in [0, 1e9). Anything else (unknown
// fields, merged repeats, UTF-8 to check) it leaves to proto.Unmarshal,
// which reads these the same way (FuzzQuotaTakeProto checks).
func decodeTakeProtoFast(data []byte, r *rawTake) bool {
	var seen uint8
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 || num < fieldReqBucket || num > fieldReqCriticality {
			return false
		}
		data = data[n:]
		bit := uint8(1) << num
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch num {
		case fieldReqBucket, fieldReqClientID:
			v, n := protowire.ConsumeBytes(data)
			if typ != protowire.BytesType || n < 0 || !printableASCII(v) {
				return false
			}
			if num == fieldReqBucket {
				r.bucket = string(v)
			} else {
				r.clientID = string(v)
			}
			data = data[n:]
		case fieldReqTokens, fieldReqCriticality:
			v, n := protowire.ConsumeVarint(data)
			if typ != protowire.VarintType || n < 0 {
				return false
			}
			if num == fieldReqTokens {
				r.tokens, r.hasTokens = int64(v), true
			} else if v > uint64(allotpb.Criticality_SHEDDABLE) {
				return false
			} else {
				r.criticality = int32(v)
			}
			data = data[n:]
		case fieldReqMaxWait:
			v, n := protowire.ConsumeBytes(data)
			if typ != protowire.BytesType || n < 0 || !protoDuration(v, r) {
				return false
			}
			data = data[n:]
		}
	}
	return true
}

// protoDuration reads a google.protobuf.Duration body into r's max_wait.
func protoDuration(b []byte, r *rawTake) bool {
	var seen uint8
	r.hasMaxWait, r.waitSeconds, r.waitNanos = true, 0, 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType || (num != fieldSeconds && num != fieldNanos) || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		v, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return false
		}
		if num == fieldSeconds {
			r.waitSeconds = int64(v)
		} else if v >= 1e9 {
			return false
		} else {
			r.waitNanos = int32(v)
		}
		b = b[n+m:]
	}
	return true
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// decodeTakeFast decodes a JSON QuotaTakeRequest written in the common
// shape: one object, keys without escapes, strings of printable ASCII
// without escapes, tokens a plain non-negative integer, max_wait
// "<seconds>[.<1-9 digits>]s", criticality by name. It reports false for
// anything else, leaving r unspecified, so the caller decodes strictly.
func decodeTakeFast(data []byte, r *rawTake) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	var seen uint8
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			key, j, ok := plainString(data, i)
			if !ok {
				return false
			}
			i = skipSpace(data, j)
			if i >= len(data) || data[i] != ':' {
				return false
			}
			i = skipSpace(data, i+1)
			var bit uint8
			switch string(key) {
			case "bucket":
				bit = 1
				if !stringField(data, &i, &r.bucket) {
					return false
				}
			case "tokens":
				bit = 2
				n, j, ok := plainInt(data, i, 15)
				if !ok {
					return false
				}
				r.tokens, r.hasTokens, i = n, true, j
			case "max_wait", "maxWait":
				bit = 4
				v, j, ok := plainString(data, i)
				if !ok {
					return false
				}
				if r.waitSeconds, r.waitNanos, ok = plainDuration(v); !ok {
					return false
				}
				r.hasMaxWait, i = true, j
			case "client_id", "clientId":
				bit = 8
				if !stringField(data, &i, &r.clientID) {
					return false
				}
			case "criticality":
				bit = 16
				v, j, ok := plainString(data, i)
				if !ok {
					return false
				}
				c, known := allotpb.Criticality_value[string(v)]
				if !known {
					return false
				}
				r.criticality, i = c, j
			default:
				return false
			}
			if seen&bit != 0 {
				return false // duplicate: protojson names it
			}
			seen |= bit
			i = skipSpace(data, i)
			if i >= len(data) {
				return false
			}
			if data[i] == '}' {
				i++
				break
			}
			if data[i] != ',' {
				return false
			}
			i = skipSpace(data, i+1)
		}
	}
	return skipSpace(data, i) == len(data)
}

// stringField reads a plainString at data[*i] into dst and advances *i.
func stringField(data []byte, i *int, dst *string) bool {
	v, j, ok := plainString(data, *i)
	if ok {
		*dst, *i = string(v), j
	}
	return ok
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at data[i] made only of printable ASCII
// other than '"' and '\\', and returns its contents and the index after
// it. Every key and id of a lease or quota request is read here, so it
// looks at eight bytes at a time while eight are left.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	j := i + 1
	for ; j+8 <= len(data); j += 8 {
		if m := unplain(binary.LittleEndian.Uint64(data[j:])); m != 0 {
			j += swar.First(m) // the first byte that is not plain
			if data[j] != '"' {
				return nil, 0, false
			}
			return data[i+1 : j], j + 1, true
		}
	}
	for ; j < len(data); j++ {
		c := data[j]
		if c == '"' {
			return data[i+1 : j], j + 1, true
		}
		if c-0x20 > 0x7e-0x20 || c == '\\' { // below 0x20 wraps round
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// unplain marks the bytes of x (eight, little-endian) that are not
// printable ASCII other than '"' and '\\' (0x20-0x7e): the first mark is
// the first such byte, and none is set if all eight are plain.
func unplain(x uint64) uint64 {
	return swar.NonASCII(x) | swar.Below(x, 0x20) | swar.Zero(x^swar.Lo*'"') | swar.Zero(x^swar.Lo*'\\') | swar.Zero(x^swar.Lo*0x7f)
}

// plainInt reads a JSON integer at data[i] without sign, exponent or
// leading zeros, of at most maxDigits digits, followed by a delimiter.
func plainInt(data []byte, i, maxDigits int) (int64, int, bool) {
	j := i
	var n int64
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		n = n*10 + int64(data[j]-'0')
		j++
	}
	digits := j - i
	if digits == 0 || digits > maxDigits || digits > 1 && data[i] == '0' {
		return 0, 0, false
	}
	if j < len(data) && !(data[j] == ',' || data[j] == '}' || data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r') {
		return 0, 0, false
	}
	return n, j, true
}

// plainDuration reads "<seconds>[.<1-9 digits>]s" (at most 11 digits of
// seconds, no sign, no leading zeros), a subset of protojson's Duration
// syntax that it reads the same way.
func plainDuration(v []byte) (int64, int32, bool) {
	if len(v) < 2 || v[len(v)-1] != 's' {
		return 0, 0, false
	}
	v = v[:len(v)-1]
	dot := len(v)
	for k, c := range v {
		if c == '.' {
			dot = k
			break
		}
	}
	sec, end, ok := plainInt(v[:dot], 0, 11)
	if !ok || end != dot {
		return 0, 0, false
	}
	if dot == len(v) {
		return sec, 0, true
	}
	nanos, ok := plainNanos(v[dot:])
	return sec, nanos, ok
}

// plainNanos reads a fraction of a second written ".<1-9 digits>" as
// nanoseconds.
func plainNanos(frac []byte) (int32, bool) {
	if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' {
		return 0, false
	}
	var nanos int32
	for k := 1; k < 10; k++ {
		nanos *= 10
		if k < len(frac) {
			c := frac[k]
			if c < '0' || c > '9' {
				return 0, false
			}
			nanos += int32(c - '0')
		}
	}
	return nanos, true
}

// Field numbers of QuotaTakeResponse (proto/quota.proto).
const (
	fieldTakeStatus     = 1
	fieldTakeWait       = 2
	fieldTakeReason     = 3
	fieldTakeLimit      = 4
	fieldTakeRemaining  = 5
	fieldTakeRetryAfter = 6
	fieldTakeWarning    = 7
	fieldTakeMatched    = 8
	fieldTakeShadow     = 9
	fieldTakeShadowStat = 10
)

// QuotaTakeResponseProto returns the reply message for decision d of
// bucket matched ("namespace:name"). wait and retry_after are always
// set, to 0s when there is none, so JSON readers always find them.
func QuotaTakeResponseProto(d *quota.Decision, matched string) *allotpb.QuotaTakeResponse {
	return &allotpb.QuotaTakeResponse{
		Status:       allotpb.QuotaTakeResponse_Status(d.Status),
		Wait:         durationpb.New(d.Wait),
		Reason:       d.Reason,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfter:   durationpb.New(d.RetryAfter),
		Warning:      d.Warning,
		Matched:      matched,
		Shadow:       d.Shadow,
		ShadowStatus: allotpb.QuotaTakeResponse_Status(d.ShadowStatus),
	}
}

// AppendQuotaTakeResponse appends the reply for decision d of bucket
// matched to b in encoding e, without allocating beyond b's growth. In
// binary protobuf it is what proto.Marshal writes for
// QuotaTakeResponseProto(d, matched); in JSON it is that message as
// protojson reads it, with proto field names, every field present, the
// status by name, durations in protojson syntax ("1.500s") and limit and
// remaining as JSON numbers:
//
//	{"status":"OK_WAIT","wait":"0.200s","reason":"","limit":100,"remaining":0,"retry_after":"0s","warning":"","matched":"logins:alice","shadow":false,"shadow_status":"STATUS_UNSPECIFIED"}
func AppendQuotaTakeResponse(b []byte, e Encoding, d *quota.Decision, matched string) []byte {
	if e == JSON {
		return appendTakeJSON(b, d, matched)
	}
	b = appendVarint(b, fieldTakeStatus, uint64(d.Status))
	b = appendDuration(b, fieldTakeWait, d.Wait)
	b = appendString(b, fieldTakeReason, d.Reason)
	b = appendVarint(b, fieldTakeLimit, uint64(d.Limit))
	b = appendVarint(b, fieldTakeRemaining, uint64(d.Remaining))
	b = appendDuration(b, fieldTakeRetryAfter, d.RetryAfter)
	b = appendString(b, fieldTakeWarning, d.Warning)
	b = appendString(b, fieldTakeMatched, matched)
	if d.Shadow {
		b = appendVarint(b, fieldTakeShadow, 1)
	}
	return appendVarint(b, fieldTakeShadowStat, uint64(d.ShadowStatus))
}

// appendDuration writes a google.protobuf.Duration field, present even
// when zero. Seconds and nanos carry d's sign, as durationpb.New makes
// them.
func appendDuration(b []byte, field protowire.Number, d time.Duration) []byte {
	sec, nsec := int64(d/time.Second), int32(d%time.Second)
	return appendSecNanos(b, field, sec, nsec, secNanosBody(sec, nsec))
}

func appendTakeJSON(b []byte, d *quota.Decision, matched string) []byte {
	b = append(b, `{"status":"`...)
	b = append(b, takeStatusName(d.Status)...)
	b = append(b, `","wait":"`...)
	b = appendJSONDuration(b, d.Wait)
	b = append(b, `","reason":`...)
	b = appendJSONString(b, d.Reason)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"retry_after":"`...)
	b = appendJSONDuration(b, d.RetryAfter)
	b = append(b, `","warning":`...)
	b = appendJSONString(b, d.Warning)
	b = append(b, `,"matched":`...)
	b = appendJSONString(b, matched)
	b = append(b, `,"shadow":`...)
	b = strconv.AppendBool(b, d.Shadow)
	b = append(b, `,"shadow_status":"`...)
	b = append(b, takeStatusName(d.ShadowStatus)...)
	return append(b, `"}`...)
}

// takeStatusName is the protojson name of status s, without the
// reflection QuotaTakeResponse_Status.String uses. A status the decision
// core never returns is written as STATUS_UNSPECIFIED.
func takeStatusName(s quota.Status) string {
	switch s {
	case quota.OK, quota.OKWait, quota.Rejected:
		return s.String()
	}
	return allotpb.QuotaTakeResponse_STATUS_UNSPECIFIED.String()
}

// appendJSONDuration writes d as protojson does: seconds with 0, 3, 6 or
// 9 fractional digits and an "s" suffix ("1.500s", "-0.000001s").
func appendJSONDuration(b []byte, d time.Duration) []byte {
	sec, nanos := int64(d/time.Second), int64(d%time.Second)
	if sec < 0 || nanos < 0 {
		b = append(b, '-')
		sec, nanos = -sec, -nanos // |math.MinInt64 / 1e9| fits
	}
	b = strconv.AppendInt(b, sec, 10)
	return append(appendFraction(b, nanos), 's')
}

// appendFraction writes nanos (in [0, 1e9)) as protojson writes the
// fraction of a second: nothing for 0, else a point and 3, 6 or 9
// digits.
func appendFraction(b []byte, nanos int64) []byte {
	if nanos == 0 {
		return b
	}
	b = append3(append(b, '.'), nanos/1e6)
	if rest := nanos % 1e6; rest != 0 {
		b = append3(b, rest/1e3)
		if rest%1e3 != 0 {
			b = append3(b, rest%1e3)
		}
	}
	return b
}

// appendJSONString writes s as a JSON string, escaping '"', '\\' and
// control characters.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
