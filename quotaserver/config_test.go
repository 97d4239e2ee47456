package quotaserver_test

import (
	"strings"
	"testing"

	"github.com/allot/allot/quotaserver"
)

// TestParseNamespacesRefuses: an invalid namespace document is an error
// that names it and its problem, and no Config comes of it.
func TestParseNamespacesRefuses(t *testing.T) {
	_, err := quotaserver.ParseNamespaces(map[string][]byte{
		"ok":  []byte(`{"dynamic_bucket_template": {"size": 2, "fill_rate": 1}}`),
		"bad": []byte(`{"dynamic_bucket_template": {"size": -2, "fill_rate": 1}}`),
	})
	if err == nil || !strings.Contains(err.Error(), "namespace bad:") || strings.Contains(err.Error(), "namespace ok") {
		t.Fatalf("err = %v, want one naming namespace bad only", err)
	}
}
