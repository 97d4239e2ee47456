package election_test

import (
	"testing"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/replica"
)

// TestPublicDefaultBucket checks that the bucket the replicas' public
// options name as their default is the election's: replica may not import
// internal/subjects, which spells it for everyone else.
func TestPublicDefaultBucket(t *testing.T) {
	if replica.DefaultBucket != election.DefaultBucket {
		t.Fatalf("replica.DefaultBucket %q, the election's %q", replica.DefaultBucket, election.DefaultBucket)
	}
}
