package wire

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// decodeGetJSONFast decodes a JSON GetCapacityRequest written in the
// plain shape clients send: one object with client_id and a list of
// resources, each with resource_id, wants, priority and the leases has
// and safe; keys without escapes, strings of printable ASCII without
// escapes, wants and capacities plain non-negative decimals, priority a
// plain integer, expiry times in UTC as the coordinator writes them
// ("2026-01-02T03:04:05.5Z") and refresh intervals in seconds ("5s"). A
// client that holds a lease sends back what it was answered, so its
// every refresh takes this path. It reports false for anything else
// (null, a repeated key, exponents, a time zone offset, a Go duration,
// ...), leaving r unspecified, so the caller decodes with protojson,
// which reads the plain shape the same way.
func decodeGetJSONFast(data []byte, r *allotpb.GetCapacityRequest, ids Names) bool {
	list := r.Resource[:0]
	*r = allotpb.GetCapacityRequest{} // as Reset, without its atomic store
	if !clientAndList(data, &r.ClientId, false, func(i int) (int, bool) {
		var rr *allotpb.ResourceRequest
		list, rr = nextResource(list)
		return resourceJSONFast(data, i, rr, ids)
	}) {
		return false
	}
	if len(list) > 0 {
		r.Resource = list
	}
	return true
}

// decodeReleaseJSONFast decodes a JSON ReleaseCapacityRequest written
// in the plain shape (see decodeGetJSONFast): one object with client_id
// and a list of resource ids, strings of printable ASCII without
// escapes. It reports false for anything else, leaving r unspecified,
// so the caller decodes with protojson.
func decodeReleaseJSONFast(data []byte, r *allotpb.ReleaseCapacityRequest, ids Names) bool {
	list := r.ResourceId[:0]
	*r = allotpb.ReleaseCapacityRequest{} // as Reset, without its atomic store
	if !clientAndList(data, &r.ClientId, true, func(i int) (int, bool) {
		v, j, ok := plainString(data, i)
		if ok {
			list = append(list, ids.Of(v))
		}
		return j, ok
	}) {
		return false
	}
	if len(list) > 0 {
		r.ResourceId = list
	}
	return true
}

// clientAndList reads the object of a JSON lease request, all of data:
// its client_id into clientID and each element of its list with elem:
// resource_id (resourceId) in a release, resource in a get. Another key,
// a repeated one, or anything after the object reports false.
func clientAndList(data []byte, clientID *string, release bool, elem func(i int) (int, bool)) bool {
	var seen uint8
	i, ok := jsonObject(data, skipSpace(data, 0), func(key []byte, i int) (int, bool) {
		var bit uint8
		var ok bool
		switch string(key) {
		case "client_id", "clientId":
			bit = 1
			ok = stringField(data, &i, clientID)
		case "resource":
			bit = 2
			ok = !release
		case "resource_id", "resourceId":
			bit = 2
			ok = release
		}
		if ok && bit == 2 {
			i, ok = jsonList(data, i, elem)
		}
		if !ok || seen&bit != 0 {
			return 0, false // unknown or repeated key: protojson names it
		}
		seen |= bit
		return i, true
	})
	return ok && skipSpace(data, i) == len(data)
}

// resourceJSONFast reads one ResourceRequest object at data[i] into rr.
func resourceJSONFast(data []byte, i int, rr *allotpb.ResourceRequest, ids Names) (int, bool) {
	has, safe := rr.Has, rr.Safe // reused if this request holds leases too
	*rr = allotpb.ResourceRequest{}
	var seen uint8
	return jsonObject(data, i, func(key []byte, i int) (int, bool) {
		var bit uint8
		var ok bool
		switch string(key) {
		case "resource_id", "resourceId":
			bit = 1
			var v []byte
			if v, i, ok = plainString(data, i); ok {
				rr.ResourceId = ids.Of(v)
			}
		case "wants":
			bit = 2
			rr.Wants, i, ok = plainDecimal(data, i)
		case "priority":
			bit = 4
			rr.Priority, i, ok = plainInt32(data, i)
		case "has":
			bit = 8
			rr.Has = reuseLease(has)
			i, ok = leaseJSONFast(data, i, rr.Has)
		case "safe":
			bit = 16
			rr.Safe = reuseLease(safe)
			i, ok = leaseJSONFast(data, i, rr.Safe)
		}
		if !ok || seen&bit != 0 {
			return 0, false
		}
		seen |= bit
		return i, true
	})
}

// leaseJSONFast reads one Lease object at data[i] into l, reusing the
// timestamp and duration l held before.
func leaseJSONFast(data []byte, i int, l *allotpb.Lease) (int, bool) {
	exp, ref := l.ExpiryTime, l.RefreshInterval
	*l = allotpb.Lease{}
	var seen uint8
	return jsonObject(data, i, func(key []byte, i int) (int, bool) {
		var bit uint8
		var ok bool
		switch string(key) {
		case "capacity":
			bit = 1
			l.Capacity, i, ok = plainDecimal(data, i)
		case "expiry_time", "expiryTime":
			bit = 2
			var sec int64
			var nsec int32
			if sec, nsec, i, ok = secNanosString(data, i, plainTimestamp); ok {
				if exp == nil {
					exp = &timestamppb.Timestamp{}
				}
				*exp = timestamppb.Timestamp{Seconds: sec, Nanos: nsec}
				l.ExpiryTime = exp
			}
		case "refresh_interval", "refreshInterval":
			bit = 4
			var sec int64
			var nsec int32
			if sec, nsec, i, ok = secNanosString(data, i, plainDuration); ok {
				if ref == nil {
					ref = &durationpb.Duration{}
				}
				*ref = durationpb.Duration{Seconds: sec, Nanos: nsec}
				l.RefreshInterval = ref
			}
		}
		if !ok || seen&bit != 0 {
			return 0, false
		}
		seen |= bit
		return i, true
	})
}

// secNanosString reads a JSON string at data[i] with parse, and returns
// its seconds and nanoseconds and the index after it.
func secNanosString(data []byte, i int, parse func([]byte) (int64, int32, bool)) (int64, int32, int, bool) {
	v, j, ok := plainString(data, i)
	if !ok {
		return 0, 0, 0, false
	}
	sec, nsec, ok := parse(v)
	return sec, nsec, j, ok
}

// plainTimestamp reads "YYYY-MM-DDTHH:MM:SS[.<1-9 digits>]Z" with a
// year from 1 and every field in range: the form protojson writes, a
// subset of what it reads (RFC 3339), read the same way.
func plainTimestamp(v []byte) (int64, int32, bool) {
	const whole = len("2006-01-02T15:04:05")
	if len(v) < whole+1 || v[len(v)-1] != 'Z' || v[4] != '-' || v[7] != '-' || v[10] != 'T' || v[13] != ':' || v[16] != ':' {
		return 0, 0, false
	}
	num := func(from, to int) int {
		n := 0
		for _, c := range v[from:to] {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day := num(0, 4), num(5, 7), num(8, 10)
	hour, minute, sec := num(11, 13), num(14, 16), num(17, 19)
	if year < 1 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 59 {
		return 0, 0, false
	}
	var nanos int32
	if frac := v[whole : len(v)-1]; len(frac) > 0 {
		var ok bool
		if nanos, ok = plainNanos(frac); !ok {
			return 0, 0, false
		}
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC)
	if t.Day() != day { // the 31st of a 30-day month, the 29th of February of a common year
		return 0, 0, false
	}
	return t.Unix(), nanos, true
}

// jsonObject reads a JSON object at data[i] (after any space), calling
// member with each key and the index of its value (after any space);
// member returns the index after the value. It returns the index after
// the closing brace.
func jsonObject(data []byte, i int, member func(key []byte, i int) (int, bool)) (int, bool) {
	return jsonSeq(data, i, '{', '}', func(i int) (int, bool) {
		key, j, ok := plainString(data, i)
		if !ok {
			return 0, false
		}
		i = skipSpace(data, j)
		if i >= len(data) || data[i] != ':' {
			return 0, false
		}
		return member(key, skipSpace(data, i+1))
	})
}

// jsonList reads a JSON array at data[i], calling elem with the index of
// each element (after any space); elem returns the index after it.
func jsonList(data []byte, i int, elem func(i int) (int, bool)) (int, bool) {
	return jsonSeq(data, i, '[', ']', elem)
}

// jsonSeq reads the items of an object or array, between open and end
// and separated by commas, at data[i]; item reads one from its first
// byte and returns the index after it.
func jsonSeq(data []byte, i int, open, end byte, item func(i int) (int, bool)) (int, bool) {
	if i >= len(data) || data[i] != open {
		return 0, false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == end {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = item(i); !ok {
			return 0, false
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return 0, false
		}
		if data[i] == end {
			return i + 1, true
		}
		if data[i] != ',' {
			return 0, false
		}
		i = skipSpace(data, i+1)
	}
}

// plainDecimal reads a JSON number at data[i] written as digits with an
// optional fraction (no sign, exponent or leading zeros, at most 24
// characters), followed by a delimiter, and parses it as protojson does.
// A number of at most 15 digits, which every wants and capacity a client
// sends back is, is its digits (below 2^53, so exact in a float64)
// divided by an exact power of ten: one correctly rounded division, so
// the same float64 strconv.ParseFloat returns (its own first attempt).
func plainDecimal(data []byte, i int) (float64, int, bool) {
	j := i
	var mant uint64
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		mant = mant*10 + uint64(data[j]-'0')
		j++
	}
	if j == i || j-i > 1 && data[i] == '0' {
		return 0, 0, false
	}
	frac := 0
	if j < len(data) && data[j] == '.' {
		k := j + 1
		for k < len(data) && data[k] >= '0' && data[k] <= '9' {
			mant = mant*10 + uint64(data[k]-'0')
			k++
		}
		if k == j+1 {
			return 0, 0, false
		}
		frac = k - j - 1
		j = k
	}
	if j-i > 24 || !delimiter(data, j) {
		return 0, 0, false
	}
	digits := j - i
	if frac > 0 {
		digits-- // the point
	}
	if digits < len(exactPow10) {
		return float64(mant) / exactPow10[frac], j, true
	}
	v, err := strconv.ParseFloat(string(data[i:j]), 64)
	return v, j, err == nil
}

// exactPow10 holds the powers of ten up to 1e15; a number of at most 15
// decimal digits is below 2^53 and so a float64 exactly, as they are.
var exactPow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// plainInt32 reads a JSON integer of at most 9 digits at data[i], with an
// optional minus sign before a non-zero value.
func plainInt32(data []byte, i int) (int32, int, bool) {
	neg := i < len(data) && data[i] == '-'
	if neg {
		i++
	}
	n, j, ok := plainInt(data, i, 9)
	if !ok || neg && n == 0 {
		return 0, 0, false
	}
	if neg {
		n = -n
	}
	return int32(n), j, true
}

// delimiter reports whether data[j] may end a JSON number in an object or
// list (or data ends there).
func delimiter(data []byte, j int) bool {
	if j >= len(data) {
		return true
	}
	switch data[j] {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
