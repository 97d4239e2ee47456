package ledger

import (
	"testing"
	"time"
)

// MaxRecordWait is the configured wait, or the default: the coordinator
// schedules its retry round from it.
func TestMaxRecordWaitIsTheConfiguredOne(t *testing.T) {
	for _, tc := range []struct{ set, want time.Duration }{
		{0, DefaultMaxRecordWait},
		{2 * time.Second, 2 * time.Second},
		{-time.Second, DefaultMaxRecordWait},
	} {
		if got := New(Config{HolderKey: testHolderKey(), Node: "n", ServerID: "s", Term: 1, MaxRecordWait: tc.set}).MaxRecordWait(); got != tc.want {
			t.Errorf("MaxRecordWait %v: got %v, want %v", tc.set, got, tc.want)
		}
	}
}
