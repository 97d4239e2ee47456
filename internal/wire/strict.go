package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/proto/allotpb"
)

// Binary protobuf keeps fields it does not know as unknown fields instead
// of failing, as protojson does. Requests are checked for them after
// decoding, so that both encodings accept exactly the same requests. The
// walks below are written per message type, not by reflection: they run
// for every request and allocate nothing unless they find a field to
// complain about. A fuzz test compares them with a reflective walk, so a
// field added to proto/allot.proto without its walk here is caught.

// isRequest reports whether m is a request message, to which the size
// limits and the unknown-field check apply. Other messages (replies) keep
// unknown fields, so that an older agent can read a newer coordinator's
// replies.
func isRequest(m proto.Message) bool {
	switch m.(type) {
	case *allotpb.GetCapacityRequest, *allotpb.ReleaseCapacityRequest, *allotpb.GetServerCapacityRequest,
		*allotpb.QuotaTakeRequest:
		return true
	}
	return false
}

// strictRequest reports an unknown field anywhere in m, a request message.
func strictRequest(m proto.Message) error {
	switch r := m.(type) {
	case *allotpb.GetCapacityRequest:
		return strictResources(r, r.GetResource())
	case *allotpb.ReleaseCapacityRequest:
		return unknownIn(r)
	case *allotpb.GetServerCapacityRequest:
		return strictGetServerCapacity(r)
	case *allotpb.QuotaTakeRequest:
		if err := unknownIn(r); err != nil {
			return err
		}
		if d := r.GetMaxWait(); d != nil {
			if err := unknownIn(d); err != nil {
				return fmt.Errorf("max_wait: %w", err)
			}
		}
	}
	return nil
}

// resourceEntry is a request's per-resource message.
type resourceEntry interface {
	proto.Message
	GetHas() *allotpb.Lease
}

// strictResources checks a request, its resource entries and their
// leases.
func strictResources[R resourceEntry](top proto.Message, res []R) error {
	if err := unknownIn(top); err != nil {
		return err
	}
	for i, r := range res {
		if err := unknownIn(r); err != nil {
			return fmt.Errorf("resource[%d]: %w", i, err)
		}
		if err := strictLease(r.GetHas()); err != nil {
			return fmt.Errorf("resource[%d].has%w", i, err)
		}
	}
	return nil
}

func strictGetServerCapacity(r *allotpb.GetServerCapacityRequest) error {
	if err := strictResources(r, r.GetResource()); err != nil {
		return err
	}
	for i, res := range r.GetResource() {
		for j, b := range res.GetWants() {
			if err := unknownIn(b); err != nil {
				return fmt.Errorf("resource[%d].wants[%d]: %w", i, j, err)
			}
		}
	}
	return nil
}

// strictLease checks a lease and its timestamp and duration. Its errors
// start with the path below the lease (": …" or ".expiry_time: …").
func strictLease(l *allotpb.Lease) error {
	if l == nil {
		return nil
	}
	if err := unknownIn(l); err != nil {
		return fmt.Errorf(": %w", err)
	}
	if t := l.GetExpiryTime(); t != nil {
		if err := unknownIn(t); err != nil {
			return fmt.Errorf(".expiry_time: %w", err)
		}
	}
	if d := l.GetRefreshInterval(); d != nil {
		if err := unknownIn(d); err != nil {
			return fmt.Errorf(".refresh_interval: %w", err)
		}
	}
	return nil
}

// unknownIn reports the first unknown field m holds, naming its number:
// the sender's schema has a field this version does not. A known field
// number sent with the wrong wire type is kept as unknown too; it is
// named as such.
func unknownIn(m proto.Message) error {
	pm := m.ProtoReflect()
	raw := pm.GetUnknown()
	if len(raw) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(raw)
	if n < 0 {
		return fmt.Errorf("%s: malformed unknown field", pm.Descriptor().Name())
	}
	if fd := pm.Descriptor().Fields().ByNumber(num); fd != nil {
		return fmt.Errorf("%s: field %d (%s) has wire type %d, which does not fit its type %s", pm.Descriptor().Name(), num, fd.Name(), typ, fd.Kind())
	}
	return fmt.Errorf("%s: unknown field %d (wire type %d); unknown fields are rejected in protobuf as in JSON: is the sender built from a newer allot.proto?", pm.Descriptor().Name(), num, typ)
}
