package main

import (
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/envoyserver"
)

// TestSkewOption: --clock-skew 0 means no skew for the coordinator and
// the Envoy partitions alike, which skewOption gives both.
func TestSkewOption(t *testing.T) {
	if coordinator.NoClockSkew != envoyserver.NoClockSkew {
		t.Fatalf("coordinator.NoClockSkew %v, envoyserver.NoClockSkew %v: skewOption serves both", coordinator.NoClockSkew, envoyserver.NoClockSkew)
	}
	if got := skewOption(0); got != coordinator.NoClockSkew {
		t.Errorf("skewOption(0) = %v, want NoClockSkew", got)
	}
	if got := skewOption(3 * time.Second); got != 3*time.Second {
		t.Errorf("skewOption(3s) = %v", got)
	}
}
