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
	pb.Partition = &allotpb.PartitionPolicy{FloorLease: durationpb.New(t.Floor.Lease)}
	switch {
	case t.HasSafeCapacity:
		sc := t.SafeCapacity
		pb.SafeCapacity = &sc
	case t.Floor.HasAbsolute:
		v := t.Floor.Absolute
		pb.Partition.Floor = &v
	default:
		v := t.Floor.Share
		pb.Partition.FloorShare = &v
	}
	for _, k := range slices.Sorted(maps.Keys(t.Params)) {
		pb.Algorithm.Parameters = append(pb.Algorithm.Parameters, &allotpb.NamedParameter{Name: k, Value: t.Params[k]})
	}
	if t.HasMaxPriority {
		mp := t.MaxPriority
		pb.MaxPriority = &mp
	}
	pb.Tenants = t.Tenants.proto()
	return pb
}

// proto returns the policy in its stored form (nil for nil), tenants by
// name.
func (p *TenantPolicy) proto() *allotpb.TenantPolicy {
	if p == nil {
		return nil
	}
	pb := &allotpb.TenantPolicy{Fair: p.Fair, MaxClients: uint32(p.MaxClients), MaxResources: uint32(p.MaxResources)}
	if p.HasDefaultMaxPriority {
		d := p.DefaultMaxPriority
		pb.DefaultMaxPriority = &d
	}
	names := slices.Sorted(maps.Keys(p.Weights))
	for name := range p.MaxPriority {
		if _, ok := p.Weights[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		s := &allotpb.TenantSettings{Name: name}
		if w, ok := p.Weights[name]; ok {
			s.Weight = &w
		}
		if mp, ok := p.MaxPriority[name]; ok {
			s.MaxPriority = &mp
		}
		pb.Accounts = append(pb.Accounts, s)
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
