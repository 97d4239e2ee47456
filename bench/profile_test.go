package bench

import (
	"context"
	"io"
	"os"
	"testing"
)

// TestChildProfiles: a helper started with --profile writes its CPU
// profile and, once asked to stop, its heap profile.
func TestChildProfiles(t *testing.T) {
	srv, shutdown, err := startServerMapped(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- ServeChild(ctx, RoleEcho, []string{"--nats", srv.ClientURL(), "--profile", dir}, readyWriter{ready}, io.Discard)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the echo ended before it was ready: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"cpu", "heap"} {
		fi, err := os.Stat(profilePath(dir, RoleEcho, kind))
		if err != nil || fi.Size() == 0 {
			t.Errorf("%s profile: %v (%v)", kind, fi, err)
		}
	}
}
