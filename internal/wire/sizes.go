package wire

import (
	"errors"
	"fmt"
)

// Request size limits. The coordinator checks a request's payload length
// with CheckSize before decoding it, so an oversized request costs no
// decoding (Unmarshal checks too). The limits admit every valid request
// as proto.Marshal, protojson or JSON.stringify write it (TestLargestRequestsFit
// builds the largest ones):
//
//   - protobuf: 1000 resources with 256-byte ids and every field at its
//     longest take 319,259 bytes; the largest valid
//     GetServerCapacityRequest (MaxBandsPerReq bands) 427,043. 512 KiB
//     leaves room for non-minimal varints.
//   - JSON: the same GetCapacityRequest takes about 460 KB compact, 540 KB
//     indented by two spaces, and 712 KB compact with ids made of '"'
//     (each escaped as \"). 768 KiB admits these and stays a quarter below
//     NATS' default max_payload of 1 MiB, so the limit is in force on a
//     default server.
//
// JSON that escapes every character of long ids as \uXXXX, or indents a
// batch of ids full of escaped characters, can exceed the JSON limit. Big
// batches belong in binary protobuf, which is also three to four times
// cheaper to decode. GetServerCapacityRequest is only guaranteed to fit in
// protobuf, the encoding coordinators use for it.
const (
	MaxProtobufRequest = 512 << 10
	MaxJSONRequest     = 768 << 10
)

// Inline decoding limits. A request up to this size is cheap enough to
// decode and validate on the handler's goroutine: at most about 100 µs
// at the slowest rates measured (BenchmarkDecodeGetCapacity,
// BenchmarkDecodeLarge: protobuf about 50 MB/s, JSON about 20 MB/s, for
// short ids). A larger one should be decoded off that goroutine, on a
// bounded pool of workers, so that a few large requests cannot delay the
// small ones behind them. An agent's request for one resource is about
// 100 bytes; for 40 resources with short ids, about 4 KiB.
const (
	InlineProtobufRequest = 4 << 10
	InlineJSONRequest     = 2 << 10
)

// ErrTooLarge marks a request whose payload exceeds its encoding's size
// limit. It is not an ErrBadRequest: the coordinator answers it with 413.
var ErrTooLarge = errors.New("request too large")

// MaxRequestSize returns the size limit of requests in encoding e.
func MaxRequestSize(e Encoding) int {
	if e == Protobuf {
		return MaxProtobufRequest
	}
	return MaxJSONRequest
}

// CheckSize returns an error wrapping ErrTooLarge when a request payload
// of n bytes in encoding e is above its limit. Call it before decoding.
func CheckSize(e Encoding, n int) error {
	limit := MaxRequestSize(e)
	if n <= limit {
		return nil
	}
	if e == Protobuf {
		return fmt.Errorf("%w: %d bytes of protobuf; the limit is %d bytes (%d KiB): split the request (at most %d resources each)",
			ErrTooLarge, n, limit, limit>>10, MaxResourcesPerReq)
	}
	return fmt.Errorf("%w: %d bytes of JSON; the limit is %d bytes (%d KiB): split the request, or send binary protobuf (header %s: %s), whose limit is %d KiB",
		ErrTooLarge, n, limit, limit>>10, HeaderContentType, ContentProtobuf, MaxProtobufRequest>>10)
}

// DecodeInline reports whether a valid-sized request of n bytes in
// encoding e is small enough to decode on the handler's goroutine (see
// InlineProtobufRequest).
func DecodeInline(e Encoding, n int) bool {
	if e == Protobuf {
		return n <= InlineProtobufRequest
	}
	return n <= InlineJSONRequest
}
