package wire

import (
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// LeaseReply is one resource's answer in a GetCapacityResponse: the fields
// of a ResourceResponse in flat form, so the coordinator can encode replies
// without building message structs.
type LeaseReply struct {
	ResourceID   string
	Capacity     float64
	Expiry       int64 // unix nanoseconds
	Refresh      time.Duration
	SafeCapacity float64
	// SafeExpiry is when SafeCapacity ends (unix nanoseconds; 0 none).
	SafeExpiry int64
	// Error, when set, says why this resource was not served; the other
	// fields but ResourceID are then ignored.
	Error     string
	ErrorCode int32
	// Shadow marks a resource in shadow mode (ResourceResponse.shadow).
	Shadow bool
}

// Field numbers from proto/allot.proto.
const (
	fieldResponse     = 1 // GetCapacityResponse.response
	fieldTerm         = 2 // GetCapacityResponse.term
	fieldResourceID   = 1 // ResourceResponse.resource_id
	fieldGets         = 2 // ResourceResponse.gets
	fieldSafeCapacity = 3 // ResourceResponse.safe_capacity
	fieldError        = 4 // ResourceResponse.error
	fieldErrorCode    = 5 // ResourceResponse.error_code
	fieldShadow       = 6 // ResourceResponse.shadow
	fieldSafeExpiry   = 7 // ResourceResponse.safe_expiry_time
	fieldCapacity     = 1 // Lease.capacity
	fieldExpiry       = 2 // Lease.expiry_time
	fieldRefresh      = 3 // Lease.refresh_interval
	fieldSeconds      = 1 // Timestamp.seconds, Duration.seconds
	fieldNanos        = 2 // Timestamp.nanos, Duration.nanos
)

// AppendGetCapacityResponse appends the binary protobuf encoding of a
// GetCapacityResponse with the given term and entries to b. It is what
// proto.Marshal produces for the same message (a test checks), except that
// -0 is written as +0, without allocating: the coordinator's reply path
// runs for every request.
func AppendGetCapacityResponse(b []byte, term uint64, entries []LeaseReply) []byte {
	for i := range entries {
		e := &entries[i]
		if e.Error != "" {
			b = appendTag(b, fieldResponse, protowire.BytesType)
			b = appendUvarint(b, uint64(stringSize(fieldResourceID, e.ResourceID)+stringSize(fieldError, e.Error)+
				varintSize(fieldErrorCode, uint64(int64(e.ErrorCode)))))
			b = appendString(b, fieldResourceID, e.ResourceID)
			b = appendString(b, fieldError, e.Error)
			b = appendVarint(b, fieldErrorCode, uint64(int64(e.ErrorCode)))
			continue
		}
		// Each size is worked out once: the lease's goes into the
		// entry's.
		expSec, expNsec := splitNanos(e.Expiry)
		refSec, refNsec := splitNanos(int64(e.Refresh))
		expBody, refBody := secNanosBody(expSec, expNsec), secNanosBody(refSec, refNsec)
		lease := doubleSize(fieldCapacity, e.Capacity) + protowire.SizeTag(fieldExpiry) + protowire.SizeBytes(expBody) +
			protowire.SizeTag(fieldRefresh) + protowire.SizeBytes(refBody)
		b = appendTag(b, fieldResponse, protowire.BytesType)
		b = appendUvarint(b, uint64(resourceResponseSize(e, lease)))
		b = appendString(b, fieldResourceID, e.ResourceID)
		b = appendTag(b, fieldGets, protowire.BytesType)
		b = appendUvarint(b, uint64(lease))
		b = appendDouble(b, fieldCapacity, e.Capacity)
		b = appendSecNanos(b, fieldExpiry, expSec, expNsec, expBody)
		b = appendSecNanos(b, fieldRefresh, refSec, refNsec, refBody)
		b = appendDouble(b, fieldSafeCapacity, e.SafeCapacity)
		if e.Shadow {
			b = appendVarint(b, fieldShadow, 1)
		}
		if e.SafeExpiry != 0 {
			sec, nsec := splitNanos(e.SafeExpiry)
			b = appendSecNanos(b, fieldSafeExpiry, sec, nsec, secNanosBody(sec, nsec))
		}
	}
	if term != 0 {
		b = appendTag(b, fieldTerm, protowire.VarintType)
		b = appendUvarint(b, term)
	}
	return b
}

// appendTag is protowire.AppendTag for a field below 16, which every
// field these encoders write is (TestFieldsFitOneByteTags): its tag is
// one byte, written without the general varint's switch.
func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	return append(b, byte(num)<<3|byte(typ))
}

// appendUvarint is protowire.AppendVarint with a value below 128 (most
// lengths here) written as its one byte at once.
func appendUvarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

// splitNanos splits unix nanoseconds into seconds and non-negative nanos,
// as google.protobuf.Timestamp and (for positive values) Duration require.
func splitNanos(ns int64) (int64, int32) {
	sec, nsec := ns/1e9, ns%1e9
	if nsec < 0 {
		sec--
		nsec += 1e9
	}
	return sec, int32(nsec)
}

// resourceResponseSize is the size of a served entry whose lease body
// is lease bytes long.
func resourceResponseSize(e *LeaseReply, lease int) int {
	n := stringSize(fieldResourceID, e.ResourceID)
	n += protowire.SizeTag(fieldGets) + protowire.SizeBytes(lease)
	n += doubleSize(fieldSafeCapacity, e.SafeCapacity)
	if e.Shadow {
		n += varintSize(fieldShadow, 1)
	}
	if e.SafeExpiry != 0 {
		sec, nsec := splitNanos(e.SafeExpiry)
		n += secNanosSize(fieldSafeExpiry, sec, nsec)
	}
	return n
}

func secNanosBody(sec int64, nsec int32) int {
	n := 0
	if sec != 0 {
		n += protowire.SizeTag(fieldSeconds) + protowire.SizeVarint(uint64(sec))
	}
	if nsec != 0 {
		n += protowire.SizeTag(fieldNanos) + protowire.SizeVarint(uint64(int64(nsec)))
	}
	return n
}

func secNanosSize(field protowire.Number, sec int64, nsec int32) int {
	return protowire.SizeTag(field) + protowire.SizeBytes(secNanosBody(sec, nsec))
}

// appendSecNanos writes a Timestamp or Duration field whose body
// (secNanosBody) is body bytes long.
func appendSecNanos(b []byte, field protowire.Number, sec int64, nsec int32, body int) []byte {
	b = appendTag(b, field, protowire.BytesType)
	b = appendUvarint(b, uint64(body))
	if sec != 0 {
		b = appendTag(b, fieldSeconds, protowire.VarintType)
		b = appendUvarint(b, uint64(sec))
	}
	if nsec != 0 {
		b = appendTag(b, fieldNanos, protowire.VarintType)
		b = appendUvarint(b, uint64(int64(nsec)))
	}
	return b
}

// Proto3 omits scalars equal to their zero value, +0 for doubles. -0 is
// omitted too, so that it reaches the client as +0 (proto.Marshal would
// keep its sign bit).
func doubleSize(field protowire.Number, v float64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeFixed64()
}

func appendDouble(b []byte, field protowire.Number, v float64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, field, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

func stringSize(field protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, field, protowire.BytesType)
	b = appendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func varintSize(field protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeVarint(v)
}

func appendVarint(b []byte, field protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, field, protowire.VarintType)
	return appendUvarint(b, v)
}
