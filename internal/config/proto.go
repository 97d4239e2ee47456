package config

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/proto/allotpb"
)

// Proto returns the template in its stored form with every default made
// explicit: compiling it again yields the same Template.
func (t *Template) Proto() *allotpb.ResourceTemplate {
	pb := &allotpb.ResourceTemplate{
		IdentifierGlob: t.Glob,
		Capacity:       t.Capacity,
		Description:    t.Description,
		Shadow:         t.Shadow,
		Algorithm: &allotpb.Algorithm{
			Kind:                 t.Algorithm,
			LeaseLength:          durationpb.New(t.LeaseLength),
			RefreshInterval:      durationpb.New(t.RefreshInterval),
			LearningModeDuration: durationpb.New(t.LearningModeDuration),
		},
	}
	if t.HasSafeCapacity {
		sc := t.SafeCapacity
		pb.SafeCapacity = &sc
	}
	for _, k := range slices.Sorted(maps.Keys(t.Params)) {
		pb.Algorithm.Parameters = append(pb.Algorithm.Parameters, &allotpb.NamedParameter{Name: k, Value: t.Params[k]})
	}
	return pb
}

// MarshalTemplateJSON writes the template as an indented JSON document
// that Parse accepts, with every default made explicit.
func MarshalTemplateJSON(t *Template) ([]byte, error) {
	// protojson randomizes its whitespace on purpose; re-indent so what
	// operators see (and diff) is stable.
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(t.Proto())
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
