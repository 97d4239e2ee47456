package quotaserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/quotaserver"
	"github.com/allot/allot/replica"
)

// TestNewReplicaRejectsBadElection: an election TTL the KV server cannot
// keep is refused when the replica is made, not when it first campaigns.
func TestNewReplicaRejectsBadElection(t *testing.T) {
	nc := natstest.Conn(t, natstest.Server(t))
	cfg := sources.QuotaFunc(func() *quota.Config { return nil })
	for _, el := range []replica.Election{{TTL: 1500 * time.Millisecond}, {Replicas: -1}} {
		_, err := quotaserver.NewReplica(nc, quotaserver.ReplicaOptions{Options: quotaserver.Options{Config: cfg}, Election: el})
		if err == nil || !strings.HasPrefix(err.Error(), "quotaserver: election") {
			t.Errorf("NewReplica with %+v: %v, want a quotaserver election error", el, err)
		}
	}
}
