package domainlimit

import "strconv"

// FailMode is what the clients of a namespace do when no domain service
// answers them (no responders, a time-out, a server error): the
// namespace's "fail" field (docs/domains-client.md, "Failing open").
type FailMode uint8

// Fail modes. The zero value is the default.
const (
	// FailShare: a client grants itself copies of a copy-limited
	// resource only within its share of each limit (Holders.Share), and
	// rate-limited hits as FailOpen does.
	FailShare FailMode = iota
	// FailOpen: a client grants itself the min copies of every call.
	FailOpen
	// FailClosed: a client grants nothing; the call fails.
	FailClosed
)

// String returns the mode as the configuration and the wire write it.
func (m FailMode) String() string {
	switch m {
	case FailShare:
		return "share"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "FailMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseFailMode reads "open", "closed" or "share". Anything else is an
// error wrapping ErrInvalid.
func ParseFailMode(s string) (FailMode, error) {
	for _, m := range []FailMode{FailShare, FailOpen, FailClosed} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, invalidf("%q is not a fail mode: want \"open\", \"closed\" or \"share\"", s)
}
