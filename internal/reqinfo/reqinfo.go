// Package reqinfo reads who sent a request across a NATS service import:
// nats-server adds the Nats-Request-Info header to a request that crosses
// an import, with the requester's account (always) and, when the import
// is marked share: true, its user, replacing a header of that name the
// client set.
//
// The account is better taken from the subject, which an export with
// account_token_position fills with it (allot's tenant subjects): the
// header is only as good as the agreement between nats-server and the
// client library on where a header line ends. nats-server 2.15 only
// replaces a header that starts after "\r\n", while nats.go also ends a
// line at a bare "\n"; a client writing the protocol by hand can thus add
// a header nats-server leaves alone, or end the block early so that
// nats.go never reads the server's. Parse refuses two values, which the
// first way produces; the second cannot be seen from the parsed headers.
package reqinfo

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Header is the header nats-server fills for service imports.
const Header = "Nats-Request-Info"

// Info is the part of the header allot reads.
type Info struct {
	// Account is the requester's account.
	Account string `json:"acc"`
	// User is the requester's authenticated user (an nkey, a user name);
	// only with share: true.
	User string `json:"user"`
}

// ErrMalformed is a header that is not the one nats-server writes.
var ErrMalformed = errors.New("bad request: malformed " + Header + " header")

// Parse returns the request info in h, and false when h has none.
func Parse(h nats.Header) (Info, bool, error) {
	vs := h.Values(Header)
	switch len(vs) {
	case 0:
		return Info{}, false, nil
	case 1:
	default:
		// nats-server writes one; another came from the client.
		return Info{}, true, fmt.Errorf("%w: %d values", ErrMalformed, len(vs))
	}
	var info Info
	if err := json.Unmarshal([]byte(vs[0]), &info); err != nil {
		return Info{}, true, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return info, true, nil
}
