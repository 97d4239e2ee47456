package bench

import (
	"os"
	"runtime"
	"testing"
)

// TestReadProcCounts checks that a sample of this process counts the
// read system calls it makes between two samples.
func TestReadProcCounts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before, err := readProc("self")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := os.ReadFile("/proc/self/stat"); err != nil {
			t.Fatal(err)
		}
	}
	after, err := readProc("self")
	if err != nil {
		t.Fatal(err)
	}
	if got := after.syscalls - before.syscalls; got < 10 {
		t.Errorf("read and write system calls counted across 10 file reads: %d, want at least 10", got)
	}
	if after.switches < before.switches {
		t.Errorf("context switches went back: %d then %d", before.switches, after.switches)
	}
	pair, err := readProc("self,self")
	if err != nil {
		t.Fatal(err)
	}
	if pair.syscalls < 2*after.syscalls {
		t.Errorf("two processes' system calls summed: %d, want at least twice %d", pair.syscalls, after.syscalls)
	}
}
