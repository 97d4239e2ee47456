package wire

import "strings"

// TenantPrefix starts the subjects on which tenants' requests arrive in
// the allot account, allot.t.<tenant>.…: a tenant's service import puts
// its account name in the third token (account_token_position), so the
// tenant cannot be forged.
const TenantPrefix = "allot.t."

// TenantSubject returns subject (allot.<rest>) as tenant's request for it
// arrives in the allot account: allot.t.<tenant>.<rest>.
func TenantSubject(tenant, subject string) string {
	return TenantPrefix + tenant + "." + strings.TrimPrefix(subject, "allot.")
}

// TenantOf returns the tenant of a tenant's subject, "" for the others.
func TenantOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, TenantPrefix)
	if !ok {
		return ""
	}
	tenant, _, _ := strings.Cut(rest, ".")
	return tenant
}
