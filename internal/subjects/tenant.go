package subjects

import "strings"

// TenantPrefix starts the subjects on which tenants' requests arrive in
// the allot account, allot.t.<tenant>.…: a tenant's service import puts
// its account name in the third token (account_token_position), so the
// tenant cannot be forged.
const TenantPrefix = prefix + "t."

// All matches every allot subject: what a tenant's service import maps
// its requests to.
const All = prefix + ">"

// TenantExport is the service the allot account exports to tenants, with
// the tenant's account name in token 3.
const TenantExport = TenantPrefix + "*.>"

// TenantImport is the subject of the export a tenant imports:
// allot.t.<tenant>.>.
func TenantImport(tenant string) string { return TenantPrefix + tenant + ".>" }

// Tenant returns subject (allot.<rest>) as tenant's request for it
// arrives in the allot account: allot.t.<tenant>.<rest>.
func Tenant(tenant, subject string) string {
	return TenantPrefix + tenant + "." + strings.TrimPrefix(subject, prefix)
}

// Untenant is the inverse of Tenant: subject as the tenant asked for it,
// allot.<rest>; other subjects are returned as they are.
func Untenant(subject string) string {
	tenant := TenantOf(subject)
	if tenant == "" {
		return subject
	}
	return prefix + strings.TrimPrefix(subject, TenantPrefix+tenant+".")
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
