package wire

import (
	"encoding/base64"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/proto/allotpb"
)

// AppendLeaseRecordJSON appends the lease record h to b as
// protojson.Marshal writes it with its default options (lowerCamelCase
// names, unset fields left out, map entries in key order), up to
// insignificant whitespace: a test compares them compacted, byte for
// byte. A leader writes its record, up to 512 KiB of summaries, on every
// raise, and protojson's reflection over it cost a fifth of the
// coordinator's CPU under a flood of newcomers.
//
// It reports false, leaving b unspecified, for what it does not write as
// protojson would and protojson may refuse: a string that is not valid
// UTF-8, a timestamp outside unix nanoseconds or with invalid nanos, a
// negative zero, a nil summary. The caller then takes protojson's path
// (and its error).
func AppendLeaseRecordJSON(b []byte, h *allotpb.LeaseHorizon) ([]byte, bool) {
	w := recordWriter{b: append(b, '{'), ok: true}
	if h.GetNode() != "" {
		w.key("node")
		w.str(h.GetNode())
	}
	if h.GetTerm() != 0 {
		w.key("term")
		w.b = append(strconv.AppendUint(append(w.b, '"'), h.GetTerm(), 10), '"')
	}
	if h.GetServerId() != "" {
		w.key("serverId")
		w.str(h.GetServerId())
	}
	w.time("horizon", h.GetHorizon())
	if rs := h.GetResources(); len(rs) > 0 {
		w.key("resources")
		w.b = append(w.b, '{')
		ids := make([]string, 0, len(rs))
		for id := range rs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for i, id := range ids {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.str(id)
			w.b = append(w.b, ':')
			w.summary(rs[id])
		}
		w.b = append(w.b, '}')
	}
	if h.GetComplete() {
		w.key("complete")
		w.b = append(w.b, "true"...)
	}
	if h.GetPartitions() != 0 {
		w.key("partitions")
		w.b = strconv.AppendUint(w.b, uint64(h.GetPartitions()), 10)
	}
	if k := h.GetHoldersKey(); len(k) > 0 {
		w.key("holdersKey")
		w.b = append(base64.StdEncoding.AppendEncode(append(w.b, '"'), k), '"')
	}
	return append(w.b, '}'), w.ok
}

// recordWriter writes a record's fields; ok turns false at the first
// value it cannot write as protojson would.
type recordWriter struct {
	b     []byte
	ok    bool
	comma bool // a field is written in the current object
}

// key writes the name of the next field of the current object.
func (w *recordWriter) key(name string) {
	if w.comma {
		w.b = append(w.b, ',')
	}
	w.comma = true
	w.b = append(w.b, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

func (w *recordWriter) str(s string) {
	var ok bool
	if w.b, ok = appendValidJSONString(w.b, s); !ok {
		w.ok = false
	}
}

// double writes v as protojson writes a double: the special values as
// strings.
func (w *recordWriter) double(v float64) {
	switch {
	case math.IsNaN(v):
		w.b = append(w.b, `"NaN"`...)
	case math.IsInf(v, 1):
		w.b = append(w.b, `"Infinity"`...)
	case math.IsInf(v, -1):
		w.b = append(w.b, `"-Infinity"`...)
	case v == 0 && math.Signbit(v):
		w.ok = false // protojson writes "-0"; never recorded
	default:
		w.b = appendJSONDouble(w.b, v)
	}
}

// time writes a set timestamp field.
func (w *recordWriter) time(name string, t *timestamppb.Timestamp) {
	if t == nil {
		return
	}
	w.key(name)
	s, n := t.GetSeconds(), int64(t.GetNanos())
	// Unix nanoseconds span 1677 to 2262, all of them years protojson
	// writes; a record's times are in it.
	if n < 0 || n >= 1e9 || s < math.MinInt64/1_000_000_000+1 || s > math.MaxInt64/1_000_000_000-1 {
		w.ok = false
		return
	}
	w.b = append(appendJSONTimestamp(append(w.b, '"'), s*1_000_000_000+n), '"')
}

// summary writes a resource's summary as an object.
func (w *recordWriter) summary(s *allotpb.ResourceSummary) {
	if s == nil {
		w.ok = false
		return
	}
	w.b = append(w.b, '{')
	w.comma = false
	if v := s.GetCeiling(); math.Float64bits(v) != 0 {
		w.key("ceiling")
		w.double(v)
	}
	w.time("latestExpiry", s.GetLatestExpiry())
	if s.GetHolders() != 0 {
		w.key("holders")
		w.b = strconv.AppendUint(w.b, uint64(s.GetHolders()), 10)
	}
	if s.GetHoldersDigest() != 0 {
		w.key("holdersDigest")
		w.b = append(strconv.AppendUint(append(w.b, '"'), s.GetHoldersDigest(), 10), '"')
	}
	w.time("holdersUntil", s.GetHoldersUntil())
	if ids := s.GetHolderIds(); len(ids) > 0 {
		w.key("holderIds")
		w.b = append(w.b, '[')
		for i, id := range ids {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.str(id)
		}
		w.b = append(w.b, ']')
	}
	if v := s.GetFloorCeiling(); math.Float64bits(v) != 0 {
		w.key("floorCeiling")
		w.double(v)
	}
	w.time("floorExpiry", s.GetFloorExpiry())
	if s.UnlistedFloors != nil {
		w.key("unlistedFloors")
		w.double(*s.UnlistedFloors)
	}
	w.b = append(w.b, '}')
	w.comma = true
}
