package secure_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// leafPermissionFix lists, per release line, the first nats-server
// version that checks the messages a leaf node sends against its user's
// permissions. Without it a child server (or anything speaking the
// leaf-node protocol with a tenant's link credentials) can publish what
// the link user may not: TestLeafLinkEnforcedAtRoot.
var leafPermissionFix = map[[2]int]int{{2, 11}: 16, {2, 12}: 7}

// enforcesLeafPermissions reports whether nats-server version v
// (major.minor.patch, with an optional suffix) has the fix.
func enforcesLeafPermissions(v string) (bool, error) {
	var major, minor, patch int
	if _, err := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return false, fmt.Errorf("version %q: %w", v, err)
	}
	if major != 2 {
		return major > 2, nil
	}
	if minor >= 14 {
		return true, nil
	}
	fixed, ok := leafPermissionFix[[2]int{major, minor}]
	return ok && patch >= fixed, nil
}

// TestServerVersionEnforcesLeafPermissions fails when the nats-server
// this module builds against is older than 2.14.0 (or 2.12.7, 2.11.16):
// the shipped configuration relies on the root enforcing leaf links'
// permissions.
func TestServerVersionEnforcesLeafPermissions(t *testing.T) {
	ok, err := enforcesLeafPermissions(server.VERSION)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("nats-server %s does not enforce leaf-node permissions on inbound messages; require >= 2.14.0 in go.mod", server.VERSION)
	}
}

func TestEnforcesLeafPermissions(t *testing.T) {
	for v, want := range map[string]bool{
		"2.14.0": true, "2.15.2": true, "2.13.9": false, "2.12.7": true, "2.12.6": false,
		"2.11.16": true, "2.11.15": false, "2.10.29": false, "3.0.0": true, "2.14.0-RC.1": true, "1.9.9": false,
	} {
		if got, err := enforcesLeafPermissions(v); err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", v, got, err, want)
		}
	}
	if _, err := enforcesLeafPermissions("v2"); err == nil {
		t.Error("no error for a malformed version")
	}
}
