//go:build unix

package level

import "syscall"

// cpuNanos is the CPU time this process has used (user and system, the
// garbage collector's included). On a machine shared with other loads a
// benchmark's CPU time moves far less than its wall time.
func cpuNanos() int64 {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return u.Utime.Nano() + u.Stime.Nano()
}
