// Package reqinfo reads who sent a request across a NATS service import:
// nats-server puts the requester's account and user in the
// Nats-Request-Info header of a request that crosses an import marked
// share: true, overwriting any such header the client set. allot's tenants
// reach its services that way (deploy/nats/secure).
package reqinfo

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
)

// Header is the header nats-server fills for shared service imports.
const Header = "Nats-Request-Info"

// Info is the part of the header allot reads.
type Info struct {
	// Account is the requester's account: for allot, the tenant.
	Account string `json:"acc"`
	// User is the requester's authenticated user (an nkey, a user name).
	User string `json:"user"`
}

// ErrMalformed is a header that is not the JSON nats-server writes.
var ErrMalformed = errors.New("bad request: malformed " + Header + " header")

// Parse returns the request info in h, and false when h has none: the
// request was sent in the service's own account.
func Parse(h nats.Header) (Info, bool, error) {
	v := h.Get(Header)
	if v == "" {
		return Info{}, false, nil
	}
	var info Info
	if err := json.Unmarshal([]byte(v), &info); err != nil {
		return Info{}, true, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return info, true, nil
}

// ErrNotOpen is a request from a tenant that the resource is not open to.
var ErrNotOpen = errors.New("not open to this tenant")

// CheckTenant reports whether a request with headers h may use something
// open to tenants (every tenant when empty). Requests without request
// info come from the service's own account and may use everything; a
// request info without an account is treated as a tenant that is listed
// nowhere. The error wraps ErrNotOpen or ErrMalformed and names what.
func CheckTenant(h nats.Header, tenants []string, what string) error {
	if len(tenants) == 0 {
		return nil
	}
	info, ok, err := Parse(h)
	if err != nil || !ok {
		return err
	}
	if info.Account == "" || !slices.Contains(tenants, info.Account) {
		return fmt.Errorf("%s is %w %q (its tenants are %q)", what, ErrNotOpen, info.Account, tenants)
	}
	return nil
}
