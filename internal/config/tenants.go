package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Limits of a template's tenant policy.
const (
	// MaxTenantSettings bounds the accounts listed in one policy.
	MaxTenantSettings = 1000
	// MaxTenantWeight bounds a tenant's weight.
	MaxTenantWeight = 1e6
	// MaxTenantCap bounds tenants.max_clients and tenants.max_resources.
	MaxTenantCap = 1 << 30
)

// PlainTenant names the claimants that come through the plain subjects
// (clients inside the allot account, child nodes) in a tenant policy.
const PlainTenant = ""

// TenantPolicy is a template's compiled tenant policy (see
// proto/config.proto, TenantPolicy). Immutable once built.
type TenantPolicy struct {
	// Fair divides each resource's capacity between tenants first.
	Fair bool
	// Weights of the tenants listed with one (default 1).
	Weights map[string]float64
	// MaxPriority of the tenants listed with one.
	MaxPriority map[string]int32
	// DefaultMaxPriority, if HasDefaultMaxPriority, bounds the tenants
	// not in MaxPriority (but the plain tenant).
	DefaultMaxPriority    int32
	HasDefaultMaxPriority bool
	// MaxClients and MaxResources cap each tenant (but the plain one);
	// 0 means no cap.
	MaxClients   int
	MaxResources int
}

// Weight returns tenant's weight in the division between tenants.
func (p *TenantPolicy) Weight(tenant string) float64 {
	if w, ok := p.Weights[tenant]; ok {
		return w
	}
	return 1
}

// PriorityBound returns the highest priority tenant's clients may claim
// under the policy, if it bounds them.
func (p *TenantPolicy) PriorityBound(tenant string) (int32, bool) {
	if b, ok := p.MaxPriority[tenant]; ok {
		return b, true
	}
	if tenant == PlainTenant {
		return 0, false
	}
	return p.DefaultMaxPriority, p.HasDefaultMaxPriority
}

// compileTenants validates a template's tenants field; nil when unset.
func compileTenants(pb *allotpb.TenantPolicy, kind allotpb.Algorithm_Kind) (*TenantPolicy, error) {
	if pb == nil {
		return nil, nil
	}
	p := &TenantPolicy{Fair: pb.GetFair()}
	if p.Fair && kind != allotpb.Algorithm_FAIR_SHARE && kind != allotpb.Algorithm_PROPORTIONAL_SHARE {
		return nil, invalid("tenants.fair", "needs algorithm FAIR_SHARE or PROPORTIONAL_SHARE: %s does not divide a shared capacity", kind)
	}
	if pb.DefaultMaxPriority != nil {
		if err := checkPriority("tenants.default_max_priority", pb.GetDefaultMaxPriority()); err != nil {
			return nil, err
		}
		p.DefaultMaxPriority, p.HasDefaultMaxPriority = pb.GetDefaultMaxPriority(), true
	}
	for _, c := range []struct {
		field string
		v     uint32
		to    *int
	}{{"tenants.max_clients", pb.GetMaxClients(), &p.MaxClients}, {"tenants.max_resources", pb.GetMaxResources(), &p.MaxResources}} {
		if c.v > MaxTenantCap {
			return nil, invalid(c.field, "%d is above the limit of %d", c.v, MaxTenantCap)
		}
		*c.to = int(c.v)
	}
	accounts := pb.GetAccounts()
	if len(accounts) > MaxTenantSettings {
		return nil, invalid("tenants.accounts", "lists %d tenants; the limit is %d", len(accounts), MaxTenantSettings)
	}
	seen := make(map[string]bool, len(accounts))
	for i, a := range accounts {
		field := fmt.Sprintf("tenants.accounts[%d]", i)
		name := a.GetName()
		if err := checkTenantName(name); err != nil {
			return nil, invalid(field+".name", "%v", err)
		}
		if seen[name] {
			return nil, invalid(field+".name", "tenant %q is listed twice", name)
		}
		seen[name] = true
		if a.Weight != nil {
			w := a.GetWeight()
			if !p.Fair {
				return nil, invalid(field+".weight", "is set but tenants.fair is not: weights only divide capacity between tenants when fair is true")
			}
			if math.IsNaN(w) || w <= 0 || w > MaxTenantWeight {
				return nil, invalid(field+".weight", "%g is not in (0, %g]", w, float64(MaxTenantWeight))
			}
			if p.Weights == nil {
				p.Weights = make(map[string]float64)
			}
			p.Weights[name] = w
		}
		if a.MaxPriority != nil {
			if err := checkPriority(field+".max_priority", a.GetMaxPriority()); err != nil {
				return nil, err
			}
			if p.MaxPriority == nil {
				p.MaxPriority = make(map[string]int32)
			}
			p.MaxPriority[name] = a.GetMaxPriority()
		}
		if a.Weight == nil && a.MaxPriority == nil {
			return nil, invalid(field, "tenant %q sets neither weight nor max_priority", name)
		}
	}
	return p, nil
}

// checkTenantName accepts an account name as the coordinator reads it
// from a tenant subject, or "" (the plain tenant).
func checkTenantName(name string) error {
	if name == PlainTenant {
		return nil
	}
	if err := wire.ValidateID("tenant name", name); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": "))
	}
	if name == "*" || name == ">" || strings.Contains(name, ".") {
		return fmt.Errorf("%q is not an account name", name)
	}
	return nil
}

// parseTenantList reads a list of tenant (NATS account) names, each
// once: the tenants a namespace is open to.
func parseTenantList(field string, raw any) ([]string, error) {
	arr, ok := raw.([]any)
	if !ok {
		return nil, parseErr(field, "want a list of tenant (NATS account) names, got %s", jsonKind(raw))
	}
	if len(arr) == 0 || len(arr) > MaxTenantSettings {
		return nil, invalid(field, "lists %d tenants; want 1 to %d (leave it out to open the namespace to every tenant)", len(arr), MaxTenantSettings)
	}
	out := make([]string, 0, len(arr))
	for i, v := range arr {
		at := fmt.Sprintf("%s[%d]", field, i)
		name, ok := v.(string)
		if !ok {
			return nil, parseErr(at, "want a tenant name, got %s", jsonKind(v))
		}
		if name == PlainTenant {
			return nil, invalid(at, "is empty: requests outside tenant accounts are always served")
		}
		if err := checkTenantName(name); err != nil {
			return nil, invalid(at, "%v", err)
		}
		if slices.Contains(out, name) {
			return nil, invalid(at, "tenant %q is listed twice", name)
		}
		out = append(out, name)
	}
	return out, nil
}

func checkPriority(field string, p int32) error {
	if p < wire.MinPriority || p > wire.MaxPriority {
		return invalid(field, "%d is outside [%d, %d]", p, wire.MinPriority, wire.MaxPriority)
	}
	return nil
}
