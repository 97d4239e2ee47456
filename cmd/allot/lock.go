package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockFileName is the file in an `allot up` data dir that its running
// process holds locked.
const lockFileName = "allot-up.lock"

// errDirLocked reports a data dir held by another `allot up`.
var errDirLocked = errors.New("data dir in use")

// dirLock is a held lock on a data dir; Release gives it up.
type dirLock struct{ f *os.File }

// lockDataDir locks dir for this process so that a second `allot up` on the
// same JetStream store fails at once instead of deposing the first (two
// servers on one store each believe they hold it). The lock is tied to the
// open file, so the kernel releases it when the process dies, however it
// dies; the pid written into the file is only for the error message.
func lockDataDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	if !held {
		holder := "another process"
		if data, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				holder = "pid " + strconv.Itoa(pid)
			}
		}
		f.Close()
		return nil, fmt.Errorf("%w: %s is locked by another allot up (%s); stop that one, or give this one its own directory with --data-dir", errDirLocked, dir, holder)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// Release unlocks the data dir.
func (l *dirLock) Release() {
	_ = l.f.Close()
}
