package ledger

import (
	"strings"
	"testing"
)

// Record keys of different identities never collide, with each other or
// with plain client ids, whatever the user names hold, and each splits
// back into its parts.
func TestClaimantKeysAreInjective(t *testing.T) {
	ids := []Claimant{{}, {Tenant: "A"}, {Tenant: "A", User: "u"}, {Tenant: "A", User: "u1"}, {Tenant: "A1", User: "u"},
		{Tenant: "A", User: "\x1e1\x1eu"}, {Tenant: "B", User: "u\x1ex"}, {Tenant: "A", User: strings.Repeat("9", 12)}}
	// Client ids are valid ids (wire.ValidateID): no control characters.
	clients := []string{"c", "1c", "u1c", "x", "A1uc"}
	seen := map[string]string{}
	for _, who := range ids {
		for _, id := range clients {
			k := who.key(id)
			desc := who.Tenant + "|" + who.User + "|" + id
			if prev, dup := seen[k]; dup {
				t.Fatalf("%q and %q share the key %q", prev, desc, k)
			}
			seen[k] = desc
			if who.Tenanted() {
				if tenant, user, cid := splitKey(k); tenant != who.Tenant || user != who.User || cid != id {
					t.Fatalf("key %q of %q splits into %q %q %q", k, desc, tenant, user, cid)
				}
			}
		}
	}
}

func TestNewClaimantRefusesBadNames(t *testing.T) {
	for _, tc := range []struct{ tenant, user, err string }{
		{"", "u", "tenant is empty"},
		{"A B", "u", "space"},
		{"A\x1eB", "u", "control"},
		{"*", "u", "not an account name"},
		{"A", strings.Repeat("u", MaxUserLen+1), "the limit is 1024"},
		{"A", "u\xff", "not valid UTF-8"},
	} {
		if _, err := NewClaimant(tc.tenant, tc.user); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("NewClaimant(%q, %d bytes): %v, want an error saying %q", tc.tenant, len(tc.user), err, tc.err)
		}
	}
	if who, err := NewClaimant("TENANT_A", ""); err != nil || who != (Claimant{Tenant: "TENANT_A"}) {
		t.Fatalf("a tenant without a user: %v %v", who, err)
	}
}

// Views show a tenant client by tenant, a hash of the user and its id,
// never the raw user name.
func TestDisplayHidesUserNames(t *testing.T) {
	key := Claimant{Tenant: "TENANT_A", User: "alice@example.com"}.key("web-1")
	got := displayID(key)
	if strings.Contains(got, "alice") || !strings.HasPrefix(got, "TENANT_A/u") || !strings.HasSuffix(got, "/web-1") {
		t.Fatalf("shown as %q", got)
	}
	if other := displayID(Claimant{Tenant: "TENANT_A", User: "bob"}.key("web-1")); other == got {
		t.Fatalf("two users' clients are shown alike: %q", got)
	}
}
