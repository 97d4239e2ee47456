package wire

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/names"
	"github.com/allot/allot/proto/allotpb"
)

// The coordinator decodes a GetCapacity or ReleaseCapacity request for
// every lease refresh, so the common shape of these requests is decoded
// by hand here, into messages the caller keeps from one request to the
// next. The fast decoders never refuse: on anything outside the common
// shape (unknown fields, a field repeated, a wire type that does not fit,
// a string that is not ASCII, JSON beyond the plain forms) they report
// false and the request is decoded again by Unmarshal, which reads these
// the same way. The result is validated by the same functions either
// way, so both paths accept, refuse and report exactly alike
// (FuzzDecodeLease checks against Unmarshal on arbitrary bytes).

// Field numbers of the lease requests (proto/allot.proto). Those of
// Lease, Timestamp and Duration are in fast.go.
const (
	fieldGetClientID   = 1 // GetCapacityRequest.client_id
	fieldGetResource   = 2 // GetCapacityRequest.resource
	fieldResResourceID = 1 // ResourceRequest.resource_id
	fieldResPriority   = 2 // ResourceRequest.priority
	fieldResHas        = 3 // ResourceRequest.has
	fieldResWants      = 4 // ResourceRequest.wants
	fieldResSafe       = 5 // ResourceRequest.safe
	fieldRelClientID   = 1 // ReleaseCapacityRequest.client_id
	fieldRelResourceID = 2 // ReleaseCapacityRequest.resource_id
)

// DecodeGetCapacity decodes a GetCapacityRequest in encoding e into r and
// validates it: the same as Unmarshal followed by ValidateGetCapacity,
// with the same result and the same errors. r is reset first, but the
// messages and lists it holds from an earlier request are reused, so a
// caller that keeps r (in a pool) decodes a common request allocating
// only its strings.
func DecodeGetCapacity(e Encoding, data []byte, r *allotpb.GetCapacityRequest) error {
	return DecodeGetCapacityNames(e, data, r, nil)
}

// Names makes the resource ids of a decoded request from their bytes
// (names.Func).
type Names = names.Func

// DecodeGetCapacityNames is DecodeGetCapacity with the resource ids made
// by ids.
func DecodeGetCapacityNames(e Encoding, data []byte, r *allotpb.GetCapacityRequest, ids Names) error {
	if !fastGet(e, data, r, ids) {
		if err := Unmarshal(e, data, r); err != nil {
			return err
		}
	}
	return ValidateGetCapacity(r)
}

func fastGet(e Encoding, data []byte, r *allotpb.GetCapacityRequest, ids Names) bool {
	if CheckSize(e, len(data)) != nil {
		return false
	}
	if e == Protobuf {
		return decodeGetProtoFast(data, r, ids)
	}
	return decodeGetJSONFast(data, r, ids)
}

// DecodeRelease decodes a ReleaseCapacityRequest in encoding e into r and
// validates it, as Unmarshal followed by ValidateRelease do; r's list is
// reused as in DecodeGetCapacity.
func DecodeRelease(e Encoding, data []byte, r *allotpb.ReleaseCapacityRequest) error {
	return DecodeReleaseNames(e, data, r, nil)
}

// DecodeReleaseNames is DecodeRelease with the resource ids made by ids.
func DecodeReleaseNames(e Encoding, data []byte, r *allotpb.ReleaseCapacityRequest, ids Names) error {
	if CheckSize(e, len(data)) != nil || !fastRelease(e, data, r, ids) {
		if err := Unmarshal(e, data, r); err != nil {
			return err
		}
	}
	return ValidateRelease(r)
}

func fastRelease(e Encoding, data []byte, r *allotpb.ReleaseCapacityRequest, ids Names) bool {
	if e == Protobuf {
		return decodeReleaseProtoFast(data, r, ids)
	}
	return decodeReleaseJSONFast(data, r, ids)
}

// decodeGetProtoFast decodes a binary GetCapacityRequest of the common
// shape into r (see the top of this file), or reports false.
func decodeGetProtoFast(data []byte, r *allotpb.GetCapacityRequest, ids Names) bool {
	list := r.Resource[:0]
	*r = allotpb.GetCapacityRequest{} // as Reset, without its atomic store
	var seen uint8
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		v, m := protowire.ConsumeBytes(data[n:])
		if m < 0 {
			return false
		}
		data = data[n+m:]
		switch num {
		case fieldGetClientID:
			if seen != 0 || !ascii(v) {
				return false
			}
			seen = 1
			r.ClientId = string(v)
		case fieldGetResource:
			var rr *allotpb.ResourceRequest
			list, rr = nextResource(list)
			if !decodeResourceFast(v, rr, ids) {
				return false
			}
		default:
			return false
		}
	}
	if len(list) > 0 {
		r.Resource = list
	}
	return true
}

// nextResource appends an empty ResourceRequest to list, reusing the one
// a previous request left in list's spare capacity.
func nextResource(list []*allotpb.ResourceRequest) ([]*allotpb.ResourceRequest, *allotpb.ResourceRequest) {
	if len(list) < cap(list) {
		if rr := list[:len(list)+1][len(list)]; rr != nil {
			return list[:len(list)+1], rr
		}
	}
	rr := &allotpb.ResourceRequest{}
	return append(list, rr), rr
}

func decodeResourceFast(b []byte, rr *allotpb.ResourceRequest, ids Names) bool {
	has, safe := rr.Has, rr.Safe
	*rr = allotpb.ResourceRequest{}
	var seen uint8
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < fieldResResourceID || num > fieldResSafe || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		switch num {
		case fieldResResourceID, fieldResHas, fieldResSafe:
			v, m := protowire.ConsumeBytes(b)
			if typ != protowire.BytesType || m < 0 {
				return false
			}
			b = b[m:]
			switch num {
			case fieldResResourceID:
				if !ascii(v) {
					return false
				}
				rr.ResourceId = ids.Of(v)
			case fieldResHas:
				rr.Has = reuseLease(has)
				if !decodeLeaseFast(v, rr.Has) {
					return false
				}
			default:
				rr.Safe = reuseLease(safe)
				if !decodeLeaseFast(v, rr.Safe) {
					return false
				}
			}
		case fieldResPriority:
			v, m := protowire.ConsumeVarint(b)
			if typ != protowire.VarintType || m < 0 {
				return false
			}
			b = b[m:]
			rr.Priority = int32(v) // as proto.Unmarshal truncates an int32
		case fieldResWants:
			v, m := protowire.ConsumeFixed64(b)
			if typ != protowire.Fixed64Type || m < 0 {
				return false
			}
			b = b[m:]
			rr.Wants = math.Float64frombits(v)
		}
	}
	return true
}

func reuseLease(l *allotpb.Lease) *allotpb.Lease {
	if l == nil {
		return &allotpb.Lease{}
	}
	return l
}

// decodeLeaseFast decodes a Lease body into l, reusing the timestamp and
// duration l held before.
func decodeLeaseFast(b []byte, l *allotpb.Lease) bool {
	exp, ref := l.ExpiryTime, l.RefreshInterval
	*l = allotpb.Lease{}
	var seen uint8
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < fieldCapacity || num > fieldRefresh || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		if num == fieldCapacity {
			v, m := protowire.ConsumeFixed64(b)
			if typ != protowire.Fixed64Type || m < 0 {
				return false
			}
			b = b[m:]
			l.Capacity = math.Float64frombits(v)
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if typ != protowire.BytesType || m < 0 {
			return false
		}
		b = b[m:]
		sec, nsec, ok := secNanosFast(v)
		if !ok {
			return false
		}
		if num == fieldExpiry {
			if exp == nil {
				exp = &timestamppb.Timestamp{}
			}
			*exp = timestamppb.Timestamp{Seconds: sec, Nanos: nsec}
			l.ExpiryTime = exp
		} else {
			if ref == nil {
				ref = &durationpb.Duration{}
			}
			*ref = durationpb.Duration{Seconds: sec, Nanos: nsec}
			l.RefreshInterval = ref
		}
	}
	return true
}

// secNanosFast reads a Timestamp or Duration body: seconds and nanos,
// each at most once, truncated to their types as proto.Unmarshal does.
func secNanosFast(b []byte) (int64, int32, bool) {
	var sec int64
	var nsec int32
	var seen uint8
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType || (num != fieldSeconds && num != fieldNanos) || seen&(1<<num) != 0 {
			return 0, 0, false
		}
		seen |= 1 << num
		v, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return 0, 0, false
		}
		b = b[n+m:]
		if num == fieldSeconds {
			sec = int64(v)
		} else {
			nsec = int32(v)
		}
	}
	return sec, nsec, true
}

// decodeReleaseProtoFast decodes a binary ReleaseCapacityRequest of the
// common shape into r, or reports false.
func decodeReleaseProtoFast(data []byte, r *allotpb.ReleaseCapacityRequest, ids Names) bool {
	list := r.ResourceId[:0]
	*r = allotpb.ReleaseCapacityRequest{}
	seenClient := false
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		v, m := protowire.ConsumeBytes(data[n:])
		if m < 0 || !ascii(v) {
			return false
		}
		data = data[n+m:]
		switch num {
		case fieldRelClientID:
			if seenClient {
				return false
			}
			seenClient = true
			r.ClientId = string(v)
		case fieldRelResourceID:
			list = append(list, ids.Of(v))
		default:
			return false
		}
	}
	if len(list) > 0 {
		r.ResourceId = list
	}
	return true
}

// ascii reports whether b is all ASCII, hence valid UTF-8 as
// proto.Unmarshal requires of a proto3 string.
func ascii(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
