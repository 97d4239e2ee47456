package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// profilePath names a helper's profile of kind in dir.
func profilePath(dir, role, kind string) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%d.%s.pprof", role, os.Getpid(), kind))
}

// startProfile starts this process's CPU profile in dir; stop ends it.
func startProfile(dir, role string) (stop func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench child: profile directory: %w", err)
	}
	f, err := os.Create(profilePath(dir, role, "cpu"))
	if err != nil {
		return nil, fmt.Errorf("bench child: CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench child: CPU profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// withHeapProfile returns a context that ends after ctx does and after
// the heap profile, as it was when ctx ended, is written to dir: the
// role stops (and lets its state go) only once the context it serves
// under has ended.
func withHeapProfile(ctx context.Context, dir, role string, stderr io.Writer) context.Context {
	out, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		<-ctx.Done()
		if err := writeHeapProfile(profilePath(dir, role, "heap")); err != nil {
			fmt.Fprintln(stderr, err)
		}
	}()
	return out
}

// writeHeapProfile writes the live heap (after a collection) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench child: heap profile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return fmt.Errorf("bench child: heap profile: %w", err)
	}
	return nil
}
