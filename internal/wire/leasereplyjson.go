package wire

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendGetCapacityResponseJSON appends the JSON reply for a
// GetCapacityResponse with the given term and entries to b: what Marshal
// writes in JSON for the same message, up to insignificant whitespace
// (a test compares them compacted, byte for byte), without building the
// message or reflecting over it. It reports false, leaving b unspecified,
// if a string in entries is not valid UTF-8, which protojson refuses to
// write (the caller then takes Marshal's path and its error).
func AppendGetCapacityResponseJSON(b []byte, term uint64, entries []LeaseReply) ([]byte, bool) {
	b = append(b, `{"response":[`...)
	for i := range entries {
		e := &entries[i]
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		b = append(b, `{"resource_id":`...)
		if b, ok = appendValidJSONString(b, e.ResourceID); !ok {
			return b, false
		}
		if e.Error != "" {
			b = append(b, `,"safe_capacity":0,"error":`...)
			if b, ok = appendValidJSONString(b, e.Error); !ok {
				return b, false
			}
			b = append(b, `,"error_code":`...)
			b = strconv.AppendInt(b, int64(e.ErrorCode), 10)
			b = append(b, `,"shadow":false}`...)
			continue
		}
		b = append(b, `,"gets":{"capacity":`...)
		b = appendJSONDouble(b, e.Capacity)
		b = append(b, `,"expiry_time":"`...)
		b = appendJSONTimestamp(b, e.Expiry)
		b = append(b, `","refresh_interval":"`...)
		b = appendJSONDuration(b, e.Refresh)
		b = append(b, `"},"safe_capacity":`...)
		b = appendJSONDouble(b, e.SafeCapacity)
		b = append(b, `,"error":"","error_code":0,"shadow":`...)
		b = strconv.AppendBool(b, e.Shadow)
		if e.SafeExpiry != 0 {
			b = append(b, `,"safe_expiry_time":"`...)
			b = appendJSONTimestamp(b, e.SafeExpiry)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	b = append(b, `],"term":"`...)
	b = strconv.AppendUint(b, term, 10)
	return append(b, `"}`...), true
}

// appendJSONDouble writes v as protojson writes a double (as
// encoding/json does: exponent form below 1e-6 and from 1e21), -0 as 0.
// Reply amounts are finite.
func appendJSONDouble(b []byte, v float64) []byte {
	if v == 0 {
		return append(b, '0')
	}
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		// An integer, exact in an int64: what 'f' writes, faster.
		return strconv.AppendInt(b, int64(v), 10)
	}
	format := byte('f')
	if abs := math.Abs(v); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		// "1e-07" is written "1e-7".
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendJSONTimestamp writes unix nanoseconds ns as protojson writes a
// google.protobuf.Timestamp: RFC 3339 in UTC with 0, 3, 6 or 9
// fractional digits. Times from 1970 on (every lease's; unix
// nanoseconds end in 2262) are written here from the civil date of their
// day, earlier ones through time's RFC 3339 fast path.
func appendJSONTimestamp(b []byte, ns int64) []byte {
	if ns < 0 {
		return appendJSONTimestampTime(b, ns)
	}
	secs, nanos := ns/1e9, ns%1e9
	days, sod := secs/86400, secs%86400
	y, m, d := civil(days) // 1970 to 2262: four digits
	b = append2(b, y/100)
	b = append2(b, y%100)
	b = append(b, '-')
	b = append2(b, m)
	b = append(b, '-')
	b = append2(b, d)
	b = append(b, 'T')
	b = append2(b, sod/3600)
	b = append(b, ':')
	b = append2(b, sod/60%60)
	b = append(b, ':')
	b = append2(b, sod%60)
	b = appendFraction(b, nanos)
	return append(b, 'Z')
}

// digitPairs holds the two decimal digits of 0 to 99.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// append2 writes 0 ≤ v < 100 in two digits.
func append2(b []byte, v int64) []byte {
	return append(b, digitPairs[2*v], digitPairs[2*v+1])
}

// append3 writes 0 ≤ v < 1000 in three digits.
func append3(b []byte, v int64) []byte {
	return append2(append(b, byte('0'+v/100)), v%100)
}

// appendJSONTimestampTime is appendJSONTimestamp through package time.
func appendJSONTimestampTime(b []byte, ns int64) []byte {
	t := time.Unix(0, ns).UTC()
	b = t.AppendFormat(b, time.RFC3339) // "2006-01-02T15:04:05Z"
	b = b[:len(b)-1]
	b = appendFraction(b, int64(t.Nanosecond()))
	return append(b, 'Z')
}

// civil returns the proleptic Gregorian date of a day counted from
// 1970-01-01 (days ≥ 0): Howard Hinnant's civil_from_days.
func civil(days int64) (y, m, d int64) {
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

// appendValidJSONString writes s as appendProtoJSONString does, or
// reports false if s is not valid UTF-8. An id of printable ASCII
// without '"' or '\\' (every id the coordinator names, in practice) is
// written as it is, without checking its bytes twice.
func appendValidJSONString(b []byte, s string) ([]byte, bool) {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"'), true
	}
	if !utf8.ValidString(s) {
		return b, false
	}
	return appendProtoJSONString(b, s), true
}

// appendProtoJSONString writes s, valid UTF-8, as a JSON string escaped
// as protojson escapes it: '"' and '\\', control characters by their
// short escape or \u00XX.
func appendProtoJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
			continue
		case c >= ' ':
			b = append(b, c)
			continue
		}
		switch c {
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(b, '"')
}
