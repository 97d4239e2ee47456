package domainwire

// A refresh lists every hold of a client on a resource, and every holder
// sends one each third of the hold TTL: after reserve, it is the body a
// domain server decodes most. DecodeRefresh reads its common shape by
// hand (as fast.go does request and reserve); anything else, duplicate
// keys included, goes to the strict Decode.

// DecodeRefresh decodes the body of a refresh into r (not validated),
// with its strings made by names (nil: copied).
func DecodeRefresh(data []byte, r *Refresh, names Names) error {
	var out Refresh
	if len(data) <= MaxPayload && scanRefresh(&cursor{b: data}, &out, names) {
		*r = out
		return nil
	}
	*r = Refresh{}
	return Decode(data, r)
}

// cursor reads JSON from b at i.
type cursor struct {
	b []byte
	i int
}

// next skips white space and reports whether c comes next, taking it if
// so.
func (c *cursor) next(ch byte) bool {
	c.i = skipSpace(c.b, c.i)
	if c.i < len(c.b) && c.b[c.i] == ch {
		c.i++
		return true
	}
	return false
}

// str reads a string without escapes (see scanString).
func (c *cursor) str() ([]byte, bool) {
	c.i = skipSpace(c.b, c.i)
	s, j, ok := scanString(c.b, c.i)
	if ok {
		c.i = j
	}
	return s, ok
}

// int reads an integer (see scanInt).
func (c *cursor) int() (int64, bool) {
	c.i = skipSpace(c.b, c.i)
	n, j, ok := scanInt(c.b, c.i)
	if ok {
		c.i = j
	}
	return n, ok
}

// object reads an object whose members member reads (after their key and
// colon); member gets the key's index in keys. A key not in keys, or one
// named twice, fails it (the strict decoder then decides).
func (c *cursor) object(keys []string, member func(k int) bool) bool {
	if !c.next('{') {
		return false
	}
	if c.next('}') {
		return true
	}
	var seen uint
	for {
		key, ok := c.str()
		if !ok || !c.next(':') {
			return false
		}
		k := -1
		for i, name := range keys {
			if string(key) == name {
				k = i
				break
			}
		}
		if k < 0 || seen&(1<<k) != 0 || !member(k) {
			return false
		}
		seen |= 1 << k
		switch {
		case c.next(','):
		case c.next('}'):
			return true
		default:
			return false
		}
	}
}

// array reads an array whose elements elem reads; empty reports an
// empty one.
func (c *cursor) array(elem func() bool) (empty, ok bool) {
	if !c.next('[') {
		return false, false
	}
	if c.next(']') {
		return true, true
	}
	for {
		if !elem() {
			return false, false
		}
		switch {
		case c.next(','):
		case c.next(']'):
			return false, true
		default:
			return false, false
		}
	}
}

var (
	refreshKeys = []string{"client_id", "holds"}
	holdKeys    = []string{"hold_id", "domain", "groups", "copies", "seal"}
)

// scanRefresh reads a refresh body of the common shape into out.
func scanRefresh(c *cursor, out *Refresh, names Names) bool {
	ok := c.object(refreshKeys, func(k int) bool {
		if k == 0 {
			s, ok := c.str()
			out.ClientID = names.Of(s)
			return ok
		}
		empty, ok := c.array(func() bool {
			var h Hold
			if !scanHold(c, &h, names) {
				return false
			}
			out.Holds = append(out.Holds, h)
			return true
		})
		if empty {
			out.Holds = []Hold{}
		}
		return ok
	})
	return ok && skipSpace(c.b, c.i) == len(c.b)
}

// scanHold reads one listed hold into h.
func scanHold(c *cursor, h *Hold, names Names) bool {
	return c.object(holdKeys, func(k int) bool {
		switch k {
		case 2:
			empty, ok := c.array(func() bool {
				s, ok := c.str()
				h.Groups = append(h.Groups, names.Of(s))
				return ok
			})
			if empty {
				h.Groups = []string{}
			}
			return ok
		case 3:
			n, ok := c.int()
			h.Copies = n
			return ok
		}
		// Hold ids and seals are copied, not made by names: each is one
		// hold's (and a seal one refresh's), so there is nothing to share.
		s, ok := c.str()
		switch k {
		case 0:
			h.HoldID = string(s)
		case 1:
			h.Domain = names.Of(s)
		default:
			h.Seal = string(s)
		}
		return ok
	})
}
