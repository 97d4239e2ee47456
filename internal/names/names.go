// Package names holds the one hook the fast decoders (internal/wire's
// lease decoders, internal/domainwire's) share: how a decoded name is made
// from its bytes. It is a leaf, with no protobuf or NATS, so that
// domainwire can take it without linking wire's codecs.
package names

// Func makes the strings of a decoded body from their bytes. A server
// passes one that hands back a string it already keeps for the same
// bytes (a resource id, a domain, a client id it has seen), so that a
// request decodes without allocating its names and what it makes shares
// them. Nil copies the bytes. Only the fast decoders use it: the result
// is the same either way.
type Func func(b []byte) string

// Of returns the string of b: f's, or a copy when f is nil.
func (f Func) Of(b []byte) string {
	if f == nil {
		return string(b)
	}
	return f(b)
}
