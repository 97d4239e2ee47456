package ledger

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/allot/allot/internal/wire"
)

// Claimant is who sent a request: the tenant and user NATS authenticated,
// for a request that came through a tenant's service import
// (allot.t.<tenant>.<node>.capacity.*), or the zero Claimant for the
// plain subjects (trusted clients inside the allot account, or a
// deployment without accounts).
//
// A client id is only meaningful within its claimant: the ledger keys a
// tenant client's records by (tenant, user, client id), so nobody can
// release, shrink or report for another identity's lease by sending its
// client id; they reach a record of their own.
type Claimant struct {
	// Tenant is the account name from the subject ("" for plain).
	Tenant string
	// User is the authenticated user within the tenant ("" when the
	// server did not say).
	User string
}

// MaxUserLen bounds the user name of a Claimant: it becomes part of every
// record key of the user's clients.
const MaxUserLen = 1024

// tenantSep starts and separates the parts of a tenant client's record
// key. It is a control character, which no client id (wire.ValidateID),
// tenant name (NewClaimant) or child node's server id may contain, so a
// tenant key never equals a plain client id or a child node's band id
// (which starts with the child's printable name).
const tenantSep = "\x1e"

// NewClaimant validates a tenant and user as they came from a tenant
// subject and the Nats-Request-Info header. The tenant must be a valid
// id (1 to 256 bytes, no space or control character) and not a subject
// wildcard; the user at most MaxUserLen bytes of UTF-8.
func NewClaimant(tenant, user string) (Claimant, error) {
	if err := wire.ValidateID("tenant", tenant); err != nil {
		return Claimant{}, err
	}
	if tenant == "*" || tenant == ">" || strings.Contains(tenant, ".") {
		return Claimant{}, fmt.Errorf("bad request: tenant %q is not an account name", tenant)
	}
	if len(user) > MaxUserLen {
		return Claimant{}, fmt.Errorf("bad request: the user name is %d bytes long; the limit is %d", len(user), MaxUserLen)
	}
	if !utf8.ValidString(user) {
		// Keys go into the lease record's protobuf strings.
		return Claimant{}, errors.New("bad request: the user name is not valid UTF-8")
	}
	return Claimant{Tenant: tenant, User: user}, nil
}

// Tenanted reports whether the claimant came through a tenant subject.
func (c Claimant) Tenanted() bool { return c.Tenant != "" }

// key is the record key of the claimant's client id: the id itself for
// plain claimants, else "\x1e<tenant>\x1e<len(user)>\x1e<user><id>". The
// user's length makes the key injective whatever bytes the user name
// holds; the tenant holds no separator (NewClaimant) and the id is what
// remains.
func (c Claimant) key(id string) string {
	if c.Tenant == "" {
		return id
	}
	return tenantSep + c.Tenant + tenantSep + strconv.Itoa(len(c.User)) + tenantSep + c.User + id
}

// splitKey returns the tenant, user and client id of a record key (tenant
// "" for a plain client id or a child node's band).
func splitKey(key string) (tenant, user, id string) {
	rest, ok := strings.CutPrefix(key, tenantSep)
	if !ok {
		return "", "", key
	}
	tenant, rest, _ = strings.Cut(rest, tenantSep)
	n, rest, _ := strings.Cut(rest, tenantSep)
	ln, err := strconv.Atoi(n)
	if err != nil || ln < 0 || ln > len(rest) {
		return tenant, "", rest // not a key this package wrote
	}
	return tenant, rest[:ln], rest[ln:]
}

// displayTenantKey shows a tenant client as "<tenant>/<user hash>/<id>":
// views and logs never carry raw user names, yet two users' clients of
// one id stay apart.
func displayTenantKey(key string) string {
	tenant, user, id := splitKey(key)
	h := fnv.New32a()
	h.Write([]byte(user))
	return fmt.Sprintf("%s/u%08x/%s", tenant, h.Sum32(), id)
}
