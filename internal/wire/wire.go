// Package wire encodes and decodes allot's NATS payloads and validates
// requests. JSON (protojson) is the default encoding; a message with header
// Content-Type: application/protobuf is binary protobuf, and so is its reply.
package wire

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/proto/allotpb"
)

// Header names and values of the wire contract (see subjects.md).
const (
	HeaderContentType = "Content-Type"
	ContentProtobuf   = "application/protobuf"
	ContentJSON       = "application/json"
)

// Limits on request contents. Requests beyond them are rejected whole.
const (
	MaxIDLen             = 256
	MaxResourcesPerReq   = 1000
	MaxWants             = 1e15
	MaxPriority          = 1000
	MinPriority          = -1000
	maxSubclientsPerBand = 1 << 40
)

// Encoding says how a payload is encoded.
type Encoding uint8

// Encodings.
const (
	JSON Encoding = iota
	Protobuf
)

// EncodingOf returns the encoding a message declares in its headers.
func EncodingOf(h nats.Header) Encoding {
	if h == nil {
		return JSON
	}
	switch strings.ToLower(strings.TrimSpace(h.Get(HeaderContentType))) {
	case ContentProtobuf, "application/x-protobuf", "application/vnd.google.protobuf":
		return Protobuf
	}
	return JSON
}

// ReplyEncodingOf returns the encoding of a coordinator's successful
// reply: JSON replies say so in Content-Type; binary protobuf replies carry
// no headers (they are the hot path, and headers cost CPU on every hop).
func ReplyEncodingOf(h nats.Header) Encoding {
	if h != nil && strings.Contains(strings.ToLower(h.Get(HeaderContentType)), "json") {
		return JSON
	}
	return Protobuf
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
	jsonOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
)

// ErrBadRequest marks errors caused by the request's contents.
var ErrBadRequest = errors.New("bad request")

// Unmarshal decodes data in encoding e into m. Errors wrap ErrBadRequest.
//
// Unknown fields are an error in JSON, and in binary protobuf for the
// request messages (GetCapacityRequest, ReleaseCapacityRequest,
// GetServerCapacityRequest), so both encodings accept the same requests.
// Other messages decoded from binary protobuf keep unknown fields: an
// agent must be able to read the replies of a newer coordinator.
func Unmarshal(e Encoding, data []byte, m proto.Message) error {
	var err error
	if e == Protobuf {
		err = proto.Unmarshal(data, m)
		if err == nil {
			err = strictRequest(m)
		}
	} else {
		if len(data) == 0 {
			return fmt.Errorf("%w: empty payload: send a JSON object (or binary protobuf with header %s: %s)", ErrBadRequest, HeaderContentType, ContentProtobuf)
		}
		err = jsonIn.Unmarshal(data, m)
	}
	if err != nil {
		return fmt.Errorf("%w: cannot decode %s %s: %v", ErrBadRequest, e, m.ProtoReflect().Descriptor().Name(), err)
	}
	return nil
}

// Marshal encodes m in encoding e.
func Marshal(e Encoding, m proto.Message) ([]byte, error) {
	if e == Protobuf {
		return proto.Marshal(m)
	}
	return jsonOut.Marshal(m)
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

func validatePriority(where string, p int32) error {
	if p < MinPriority || p > MaxPriority {
		return badf("%s: priority %d is outside [%d, %d]", where, p, MinPriority, MaxPriority)
	}
	return nil
}

func validateLease(where string, l *allotpb.Lease) error {
	if l == nil {
		return nil
	}
	if err := ValidateAmount(where+": has.capacity", l.GetCapacity()); err != nil {
		return err
	}
	if t := l.GetExpiryTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			return badf("%s: has.expiry_time: %v", where, err)
		}
	}
	if d := l.GetRefreshInterval(); d != nil {
		if err := d.CheckValid(); err != nil {
			return badf("%s: has.refresh_interval: %v", where, err)
		}
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

// ValidateGetCapacity checks a GetCapacityRequest completely.
func ValidateGetCapacity(r *allotpb.GetCapacityRequest) error {
	if err := ValidateID("client_id", r.GetClientId()); err != nil {
		return err
	}
	if err := checkCount(len(r.GetResource())); err != nil {
		return err
	}
	for i, res := range r.GetResource() {
		// Field names are formatted only on the error path: this runs for
		// every request.
		if err := ValidateID("resource_id", res.GetResourceId()); err != nil {
			return fmt.Errorf("resource[%d]: %w", i, err)
		}
		if err := ValidateAmount("wants", res.GetWants()); err != nil {
			return fmt.Errorf("resource[%d]: %w", i, err)
		}
		if err := validatePriority("priority", res.GetPriority()); err != nil {
			return fmt.Errorf("resource[%d]: %w", i, err)
		}
		if err := validateLease("lease", res.GetHas()); err != nil {
			return fmt.Errorf("resource[%d]: %w", i, err)
		}
	}
	if i, j := duplicate(r.GetResource()); i >= 0 {
		return badf("resource[%d]: resource_id %q appears twice (also resource[%d])", j, r.GetResource()[i].GetResourceId(), i)
	}
	return nil
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
		if err := ValidateID(fmt.Sprintf("resource_id[%d]", i), id); err != nil {
			return err
		}
	}
	return nil
}

// ValidateGetServerCapacity checks a GetServerCapacityRequest.
func ValidateGetServerCapacity(r *allotpb.GetServerCapacityRequest) error {
	if err := ValidateID("server_id", r.GetServerId()); err != nil {
		return err
	}
	if err := checkCount(len(r.GetResource())); err != nil {
		return err
	}
	seen := make(map[string]struct{}, len(r.GetResource()))
	for i, res := range r.GetResource() {
		where := fmt.Sprintf("resource[%d]", i)
		if err := ValidateID(where+".resource_id", res.GetResourceId()); err != nil {
			return err
		}
		if _, dup := seen[res.GetResourceId()]; dup {
			return badf("%s: resource_id %q appears twice", where, res.GetResourceId())
		}
		seen[res.GetResourceId()] = struct{}{}
		if err := ValidateAmount(where+".outstanding", res.GetOutstanding()); err != nil {
			return err
		}
		if err := validateLease(where, res.GetHas()); err != nil {
			return err
		}
		if len(res.GetWants()) == 0 {
			return badf("%s: no priority bands in wants", where)
		}
		if len(res.GetWants()) > 2*MaxPriority+1 {
			return badf("%s: %d priority bands; at most %d", where, len(res.GetWants()), 2*MaxPriority+1)
		}
		bands := make(map[int32]struct{}, len(res.GetWants()))
		for j, b := range res.GetWants() {
			bw := fmt.Sprintf("%s.wants[%d]", where, j)
			if err := validatePriority(bw, b.GetPriority()); err != nil {
				return err
			}
			if _, dup := bands[b.GetPriority()]; dup {
				return badf("%s: priority %d appears twice", bw, b.GetPriority())
			}
			bands[b.GetPriority()] = struct{}{}
			if b.GetNumClients() < 1 || b.GetNumClients() > maxSubclientsPerBand {
				return badf("%s: num_clients %d is outside [1, %d]", bw, b.GetNumClients(), int64(maxSubclientsPerBand))
			}
			if err := ValidateAmount(bw+".wants", b.GetWants()); err != nil {
				return err
			}
		}
	}
	return nil
}
