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
// first way produces; CheckBlock refuses a block with bytes nats.go did
// not read, which the second way produces.
package reqinfo

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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

// MaxValues bounds the header values CheckBlock accepts. A block written
// with bare "\n" line ends and no space after the colons is up to
// 2+2*MaxValues bytes shorter than the canonical one; the server's own
// line, which an early end hides, is longer than that (at least
// len("Nats-Request-Info: {\"acc\":\"A\"}\r\n") = 32 bytes), so hidden
// bytes cannot be made up for by short lines.
const MaxValues = 8

// ErrHidden is a header block that may hide the server's request info
// from nats.go.
var ErrHidden = errors.New("bad request: a header block that nats.go does not read as nats-server wrote it (bare \\n line ends?), or not in the form NATS clients write")

// CheckBlock checks that h is all of a header block of wireLen bytes,
// and that the server's Nats-Request-Info line is not glued to another:
//   - A block nats.go stopped reading early, at a blank line ending in a
//     bare "\n", is longer than what it read; the rest, where nats-server
//     put its line, is hidden. So the block may be no longer than the
//     canonical encoding of h ("NATS/1.0\r\n", a "Key: value\r\n" line
//     per value, "\r\n"), with at most MaxValues values and no status (a
//     request has none).
//   - nats-server appends its line where the client's block ends, less
//     its last two bytes, which it takes for "\r\n": a block ending
//     without them glues the server's line to the client's last one. So
//     no other key or value may contain the header's name.
//
// wireLen is the length of the message's header block on the wire
// (HeaderLen).
func CheckBlock(h nats.Header, wireLen int) error {
	if len(h) == 0 && wireLen == 0 {
		return nil
	}
	canonical, values := len("NATS/1.0\r\n\r\n"), 0
	for k, vs := range h {
		if k == "Status" || k == "Description" {
			return fmt.Errorf("%w: a request with a status line", ErrHidden)
		}
		if k != Header && strings.Contains(k, Header) {
			return fmt.Errorf("%w: header %q", ErrHidden, k)
		}
		for _, v := range vs {
			if strings.Contains(v, Header) {
				return fmt.Errorf("%w: %s in the value of %q", ErrHidden, Header, k)
			}
			canonical += len(k) + len(": ") + len(v) + len("\r\n")
			values++
		}
	}
	switch {
	case values > MaxValues:
		return fmt.Errorf("%w: %d header values; at most %d", ErrHidden, values, MaxValues)
	case wireLen > canonical:
		return fmt.Errorf("%w: %d bytes on the wire, %d read", ErrHidden, wireLen, canonical)
	}
	return nil
}

// HeaderLen returns the length of m's header block on the wire, for a
// message received by nats.go.
func HeaderLen(m *nats.Msg) int {
	return m.Size() - len(m.Subject) - len(m.Reply) - len(m.Data)
}
