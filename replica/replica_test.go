package replica_test

import (
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/replica"
)

func TestWithDefaults(t *testing.T) {
	for _, c := range []struct {
		name string
		in   replica.Election
		want replica.Election
		err  string
	}{
		{"zero", replica.Election{}, replica.Election{Bucket: replica.DefaultBucket, TTL: replica.DefaultTTL, Replicas: replica.DefaultReplicas}, ""},
		{"kept", replica.Election{Bucket: "b", TTL: 12 * time.Second, Replicas: 3}, replica.Election{Bucket: "b", TTL: 12 * time.Second, Replicas: 3}, ""},
		{"fractional TTL", replica.Election{TTL: 1500 * time.Millisecond}, replica.Election{}, "whole seconds"},
		{"short TTL", replica.Election{TTL: 500 * time.Millisecond}, replica.Election{}, "at least 1s"},
		{"negative TTL", replica.Election{TTL: -time.Second}, replica.Election{}, "at least 1s"},
		{"negative replicas", replica.Election{Replicas: -1}, replica.Election{}, "replicas -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.in.WithDefaults()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("WithDefaults(%+v) = %v, want an error with %q", c.in, err, c.err)
				}
				if c.in.Validate() == nil {
					t.Fatalf("Validate(%+v) = nil", c.in)
				}
				return
			}
			if err != nil || got.Bucket != c.want.Bucket || got.TTL != c.want.TTL || got.Replicas != c.want.Replicas {
				t.Fatalf("WithDefaults(%+v) = %+v, %v; want %+v", c.in, got, err, c.want)
			}
		})
	}
}
