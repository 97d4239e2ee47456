// Package wire encodes and decodes allot's NATS payloads and validates
// requests. JSON (protojson) is the default encoding; a message with header
// Content-Type: application/protobuf is binary protobuf, and so is its reply.
package wire

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// Header names and values of the wire contract (see subjects.md).
const (
	HeaderContentType = "Content-Type"
	ContentProtobuf   = "application/protobuf"
	ContentJSON       = "application/json"
)

// Headers of the overload contract (subjects.md, "Overload"; the
// intake, internal/leader, applies them).
const (
	// HeaderTimeout is how long the sender waits for the answer, in
	// whole milliseconds: a request still waiting in a service's intake
	// after that is dropped unanswered.
	HeaderTimeout = "Allot-Timeout"
	// HeaderClient is the sender's client id, sent by an agent that holds
	// a lease of the coordinator: the coordinator takes its request
	// before newcomers' if it knows the client as a holder.
	HeaderClient = "Allot-Client"
	// HeaderRetryAfter, on an overloaded service's 503 or 429, is how long
	// to wait before sending again, in whole milliseconds. nats-server's
	// own 503 (no responders) never carries it.
	HeaderRetryAfter = "Allot-Retry-After"
	// HeaderLeasePartitions, on every reply of a coordinator whose node
	// spreads its resources over more than one lease partition, is how
	// many: a client then sends each partition its own resources
	// (subjects.md, "Lease partitions"). Absent: one.
	HeaderLeasePartitions = "Allot-Lease-Partitions"
)

// Limits on request contents. Requests beyond them are rejected whole.
const (
	MaxIDLen             = 256
	MaxResourcesPerReq   = 1000
	MaxWants             = 1e15
	MaxPriority          = 1000
	MinPriority          = -1000
	maxSubclientsPerBand = 1 << 40
	// MaxBandsPerReq bounds the priority bands of one
	// GetServerCapacityRequest, all resources together, so that every valid
	// request fits MaxProtobufRequest (see sizes.go).
	MaxBandsPerReq = 4096
	// MaxLeaseLength bounds has.refresh_interval: a coordinator never asks
	// a client to wait longer than a lease lasts, and leases last at most
	// a day (internal/config.MaxLeaseLength).
	MaxLeaseLength = 24 * time.Hour
)

// Encoding says how a payload is encoded.
type Encoding uint8

// Encodings.
const (
	JSON Encoding = iota
	Protobuf
)

// EncodingOf returns the encoding a message declares in its headers. h
// is a message's headers as NATS carries them: a nats.Header or a
// micro.Headers passes as it is, without this package linking a client.
func EncodingOf(h map[string][]string) Encoding {
	return EncodingOfType(contentType(h))
}

// EncodingOfType is the encoding a request of Content-Type ct is in
// ("" is JSON), as EncodingOf: for a caller that has read the header.
func EncodingOfType(ct string) Encoding {
	// The forms clients send are matched as they are: this runs for
	// every request, and lowercasing costs a pass over the value.
	switch ct {
	case ContentProtobuf:
		return Protobuf
	case "", ContentJSON:
		return JSON
	}
	switch strings.ToLower(strings.TrimSpace(ct)) {
	case ContentProtobuf, "application/x-protobuf", "application/vnd.google.protobuf":
		return Protobuf
	}
	return JSON
}

// ReplyEncodingOf returns the encoding of a coordinator's successful
// reply: JSON replies say so in Content-Type; binary protobuf replies carry
// no headers (they are the hot path, and headers cost CPU on every hop).
// h is as for EncodingOf.
func ReplyEncodingOf(h map[string][]string) Encoding {
	ct := contentType(h)
	switch ct {
	case "":
		return Protobuf
	case ContentJSON:
		return JSON
	}
	if strings.Contains(strings.ToLower(ct), "json") {
		return JSON
	}
	return Protobuf
}

// contentType returns h's first Content-Type value, or "". NATS header
// keys are case-sensitive, so the key is looked up as written, as
// nats.Header.Get does.
func contentType(h map[string][]string) string {
	if v := h[HeaderContentType]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ContentType returns the header value for e.
func (e Encoding) ContentType() string {
	if e == Protobuf {
		return ContentProtobuf
	}
	return ContentJSON
}

var (
	jsonIn  = protojson.UnmarshalOptions{DiscardUnknown: false}
	jsonOut = protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}
)

// ErrBadRequest marks errors caused by the request's contents.
var ErrBadRequest = errors.New("bad request")

// Unmarshal decodes data in encoding e into m. Errors wrap ErrBadRequest,
// or ErrTooLarge for a request above its size limit.
//
// Unknown fields are an error in JSON, and in binary protobuf for the
// request messages (GetCapacityRequest, ReleaseCapacityRequest,
// GetServerCapacityRequest), so both encodings accept the same requests.
// Other messages decoded from binary protobuf keep unknown fields: an
// agent must be able to read the replies of a newer coordinator.
//
// A request above its encoding's size limit is not decoded; the error
// wraps ErrTooLarge (see CheckSize).
//
// In JSON a google.protobuf.Duration is read in protojson's form ("0.5s")
// and as a Go duration ("500ms", "1m30s"), as templates write them.
func Unmarshal(e Encoding, data []byte, m proto.Message) error {
	req := isRequest(m)
	if req {
		if err := CheckSize(e, len(data)); err != nil {
			return err
		}
	}
	var err error
	if e == Protobuf {
		err = proto.Unmarshal(data, m)
		if err == nil && req {
			err = strictRequest(m)
		}
	} else {
		if len(data) == 0 {
			return fmt.Errorf("%w: empty payload: send a JSON object (or binary protobuf with header %s: %s)", ErrBadRequest, HeaderContentType, ContentProtobuf)
		}
		err = jsonIn.Unmarshal(data, m)
		if err != nil {
			// Durations written the Go way ("500ms") are read too.
			// With them read, what is left to report is the real problem.
			if alt := goDurations(data, m.ProtoReflect().Descriptor()); alt != nil {
				proto.Reset(m)
				err = jsonIn.Unmarshal(alt, m)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%w: cannot decode %s %s: %v", ErrBadRequest, e, m.ProtoReflect().Descriptor().Name(), err)
	}
	return nil
}

// Marshal encodes m in encoding e. It first turns every -0 double in m
// into +0, so that no reply carries "-0" (JSON) or a negative zero
// (protobuf). JSON output has every scalar and list field, with proto
// field names; a message field that is not set (such as gets in a
// ResourceResponse that carries an error) is left out rather than written
// as null.
func Marshal(e Encoding, m proto.Message) ([]byte, error) {
	positiveZeros(m.ProtoReflect())
	if e == Protobuf {
		return proto.Marshal(m)
	}
	return jsonOut.Marshal(m)
}

// positiveZeros replaces -0 by +0 in every double and float field of m and
// of the messages it holds.
func positiveZeros(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				m.Get(fd).Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
					positiveZeros(v.Message())
					return true
				})
			} else if isFloat(fd.MapValue()) {
				mp := m.Mutable(fd).Map()
				mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
					if negZero(v.Float()) {
						mp.Set(k, protoreflect.ValueOfFloat64(0))
					}
					return true
				})
			}
		case fd.IsList():
			l := m.Get(fd).List()
			for j := range l.Len() {
				switch {
				case fd.Message() != nil:
					positiveZeros(l.Get(j).Message())
				case isFloat(fd) && negZero(l.Get(j).Float()):
					m.Mutable(fd).List().Set(j, zeroOf(fd))
				}
			}
		case fd.Message() != nil:
			positiveZeros(m.Get(fd).Message())
		case isFloat(fd) && negZero(m.Get(fd).Float()):
			m.Set(fd, zeroOf(fd))
		}
	}
}

func isFloat(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.DoubleKind || fd.Kind() == protoreflect.FloatKind
}

func negZero(f float64) bool { return f == 0 && math.Signbit(f) }

func zeroOf(fd protoreflect.FieldDescriptor) protoreflect.Value {
	if fd.Kind() == protoreflect.FloatKind {
		return protoreflect.ValueOfFloat32(0)
	}
	return protoreflect.ValueOfFloat64(0)
}

// String names the encoding.
func (e Encoding) String() string {
	if e == Protobuf {
		return "protobuf"
	}
	return "JSON"
}

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, args...)...)
}

// ValidateID checks a client, server or resource identifier.
func ValidateID(kind, id string) error {
	if id == "" {
		return badf("%s is empty", kind)
	}
	if len(id) > MaxIDLen {
		return badf("%s is %d bytes long; the limit is %d", kind, len(id), MaxIDLen)
	}
	// Most ids are ASCII, whose printable non-space characters are
	// exactly '!' to '~': checked by byte, without decoding runes.
	ascii := true
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f {
			ascii = false
			break
		}
	}
	if ascii {
		return nil
	}
	if !utf8.ValidString(id) {
		return badf("%s %q is not valid UTF-8", kind, id)
	}
	for _, r := range id {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return badf("%s %q contains a space or control character", kind, id)
		}
	}
	return nil
}

// ValidateAmount checks a wants or capacity value.
func ValidateAmount(what string, v float64) error {
	switch {
	case math.IsNaN(v):
		return badf("%s is NaN", what)
	case math.IsInf(v, 0):
		return badf("%s is infinite", what)
	case v < 0:
		return badf("%s is negative (%g)", what, v)
	case v > MaxWants:
		return badf("%s is %g; the limit is %g", what, v, float64(MaxWants))
	}
	return nil
}

// amount validates *v like ValidateAmount and turns -0 into +0: -0 is a
// valid amount, but a reply computed from it could carry "-0" (JSON) or a
// sign bit (protobuf) that no client expects. Validation is the single
// place every request value passes, so it is normalised here.
func amount(what string, v *float64) error {
	if err := ValidateAmount(what, *v); err != nil {
		return err
	}
	if *v == 0 {
		*v = 0
	}
	return nil
}

func validatePriority(p int32) error {
	if p < MinPriority || p > MaxPriority {
		return badf("priority %d is outside [%d, %d]", p, MinPriority, MaxPriority)
	}
	return nil
}

// maxExpirySeconds is the last second whose instants are all representable
// as int64 unix nanoseconds (2262-04-11T23:47:15Z), the coordinator's
// clock type.
const maxExpirySeconds = math.MaxInt64/int64(time.Second) - 1

// validateLease checks the lease a client says it holds ("has", or its
// floor, "safe") and normalises its capacity. Errors name the field below
// the lease.
func validateLease(name string, l *allotpb.Lease) error {
	if l == nil {
		return nil
	}
	capField := "has.capacity"
	if name == "safe" {
		capField = "safe.capacity" // constants: this runs for every request
	}
	if err := amount(capField, &l.Capacity); err != nil {
		return err
	}
	if err := validateTime(name, ".expiry_time", l.GetExpiryTime()); err != nil {
		return err
	}
	if d := l.GetRefreshInterval(); d != nil {
		if err := d.CheckValid(); err != nil {
			return badf("%s.refresh_interval: %v", name, err)
		}
		switch {
		case d.GetSeconds() < 0 || d.GetNanos() < 0:
			return badf("%s.refresh_interval %s is negative", name, d.AsDuration())
		case d.AsDuration() > MaxLeaseLength:
			return badf("%s.refresh_interval %s is longer than the limit of %s", name, d.AsDuration(), MaxLeaseLength)
		}
	}
	return nil
}

// validateTime checks a time a request carries (nil is fine), the field
// name+suffix, joined only on the error path.
func validateTime(name, suffix string, t *timestamppb.Timestamp) error {
	if t == nil {
		return nil
	}
	if err := t.CheckValid(); err != nil {
		return badf("%s%s: %v", name, suffix, err)
	}
	if t.GetSeconds() < 0 || t.GetSeconds() > maxExpirySeconds {
		return badf("%s%s %s is outside [%s, %s]", name, suffix, t.AsTime().Format(time.RFC3339Nano),
			time.Unix(0, 0).UTC().Format(time.RFC3339), time.Unix(maxExpirySeconds, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func checkCount(n int) error {
	if n == 0 {
		return badf("no resources in request")
	}
	if n > MaxResourcesPerReq {
		return badf("%d resources in one request; the limit is %d", n, MaxResourcesPerReq)
	}
	return nil
}

// ValidateGetCapacity checks a GetCapacityRequest completely and turns
// every -0 amount in it (wants, has.capacity) into +0.
func ValidateGetCapacity(r *allotpb.GetCapacityRequest) error {
	if err := ValidateID("client_id", r.GetClientId()); err != nil {
		return err
	}
	if err := checkCount(len(r.GetResource())); err != nil {
		return err
	}
	for i, res := range r.GetResource() {
		// Field names are formatted only on the error path: this runs for
		// every request, and allocates nothing for a valid one.
		if err := validateResource(res); err != nil {
			return fmt.Errorf("resource[%d]: %w", i, err)
		}
	}
	if i, j := duplicate(r.GetResource()); i >= 0 {
		return badf("resource[%d]: resource_id %q appears twice (also resource[%d])", j, r.GetResource()[i].GetResourceId(), i)
	}
	return nil
}

func validateResource(res *allotpb.ResourceRequest) error {
	if err := ValidateID("resource_id", res.GetResourceId()); err != nil {
		return err
	}
	if err := amount("wants", &res.Wants); err != nil {
		return err
	}
	if err := validatePriority(res.GetPriority()); err != nil {
		return err
	}
	if err := validateLease("has", res.GetHas()); err != nil {
		return err
	}
	return validateLease("safe", res.GetSafe())
}

// duplicate finds two requests for the same resource. Small requests (the
// common case) are compared pairwise without allocating.
func duplicate(res []*allotpb.ResourceRequest) (int, int) {
	if len(res) <= 16 {
		for j := range res {
			for i := range j {
				if res[i].GetResourceId() == res[j].GetResourceId() {
					return i, j
				}
			}
		}
		return -1, -1
	}
	seen := make(map[string]int, len(res))
	for j, x := range res {
		if i, dup := seen[x.GetResourceId()]; dup {
			return i, j
		}
		seen[x.GetResourceId()] = j
	}
	return -1, -1
}

// ValidateRelease checks a ReleaseCapacityRequest.
func ValidateRelease(r *allotpb.ReleaseCapacityRequest) error {
	if err := ValidateID("client_id", r.GetClientId()); err != nil {
		return err
	}
	if err := checkCount(len(r.GetResourceId())); err != nil {
		return err
	}
	for i, id := range r.GetResourceId() {
		if err := ValidateID("resource_id", id); err != nil {
			return fmt.Errorf("resource_id[%d]: %w", i, err)
		}
	}
	return nil
}

// ValidateGetServerCapacity checks a GetServerCapacityRequest and turns
// every -0 amount in it (outstanding, has.capacity, wants) into +0.
func ValidateGetServerCapacity(r *allotpb.GetServerCapacityRequest) error {
	if err := ValidateID("server_id", r.GetServerId()); err != nil {
		return err
	}
	if err := checkCount(len(r.GetResource())); err != nil {
		return err
	}
	bands := 0
	for _, res := range r.GetResource() {
		bands += len(res.GetWants())
	}
	if bands > MaxBandsPerReq {
		return badf("%d priority bands in one request; the limit is %d: split it", bands, MaxBandsPerReq)
	}
	seen := make(map[string]struct{}, len(r.GetResource()))
	for i, res := range r.GetResource() {
		if _, dup := seen[res.GetResourceId()]; dup {
			return badf("resource[%d]: resource_id %q appears twice", i, res.GetResourceId())
		}
		seen[res.GetResourceId()] = struct{}{}
		if err := validateServerResource(res); err != nil {
			return fmt.Errorf("resource[%d]: %w", i, err)
		}
	}
	return nil
}

func validateServerResource(res *allotpb.ServerCapacityResourceRequest) error {
	if err := ValidateID("resource_id", res.GetResourceId()); err != nil {
		return err
	}
	if err := amount("outstanding", &res.Outstanding); err != nil {
		return err
	}
	if err := amount("safe_outstanding", &res.SafeOutstanding); err != nil {
		return err
	}
	if err := validateTime("safe_expiry_time", "", res.GetSafeExpiryTime()); err != nil {
		return err
	}
	if err := validateLease("has", res.GetHas()); err != nil {
		return err
	}
	if len(res.GetWants()) == 0 {
		return badf("no priority bands in wants")
	}
	if len(res.GetWants()) > 2*MaxPriority+1 {
		return badf("%d priority bands; at most %d", len(res.GetWants()), 2*MaxPriority+1)
	}
	bands := make(map[int32]struct{}, len(res.GetWants()))
	for j, b := range res.GetWants() {
		if err := validateBand(b, bands); err != nil {
			return fmt.Errorf("wants[%d]: %w", j, err)
		}
	}
	return nil
}

func validateBand(b *allotpb.PriorityBandAggregate, seen map[int32]struct{}) error {
	if err := validatePriority(b.GetPriority()); err != nil {
		return err
	}
	if _, dup := seen[b.GetPriority()]; dup {
		return badf("priority %d appears twice", b.GetPriority())
	}
	seen[b.GetPriority()] = struct{}{}
	if b.GetNumClients() < 1 || b.GetNumClients() > maxSubclientsPerBand {
		return badf("num_clients %d is outside [1, %d]", b.GetNumClients(), int64(maxSubclientsPerBand))
	}
	return amount("wants", &b.Wants)
}
