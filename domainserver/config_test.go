package domainserver_test

import (
	"strings"
	"testing"

	"github.com/allot/allot/domainserver"
)

// TestParseDomainsRefuses: an invalid namespace document is an error
// that names it, and no Config comes of it.
func TestParseDomainsRefuses(t *testing.T) {
	_, err := domainserver.ParseDomains(map[string][]byte{
		"ok":  []byte("resources:\n  sandboxes: {kind: copies, domain_limit: 1, global_limit: 2}\n"),
		"bad": []byte("resources:\n  sandboxes: {kind: copies, domain_limit: -1}\n"),
	})
	if err == nil || !strings.Contains(err.Error(), "namespace bad:") || strings.Contains(err.Error(), "namespace ok") {
		t.Fatalf("err = %v, want one naming namespace bad only", err)
	}
}
