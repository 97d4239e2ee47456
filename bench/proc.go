package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is Linux's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat; it is 100 on every mainstream Linux build.
const clockTicks = 100

// procSample is a process's CPU time and resident set at one moment.
type procSample struct {
	cpu    time.Duration // user + system, all threads
	rssKiB int64
	hwmKiB int64
	// syscalls counts its read and write system calls (syscr+syscw of
	// /proc/<pid>/io, all threads), switches its threads' context
	// switches (voluntary and not, of the threads alive now): where a
	// process's CPU goes beside its own code.
	syscalls, switches int64
}

// readProc samples /proc/<pid> ("self" for this process); pids
// separated by commas sample several processes, their CPU and resident
// sets summed.
func readProc(pid string) (procSample, error) {
	if strings.Contains(pid, ",") {
		var sum procSample
		for p := range strings.SplitSeq(pid, ",") {
			s, err := readProc(p)
			if err != nil {
				return sum, err
			}
			sum.cpu, sum.rssKiB, sum.hwmKiB = sum.cpu+s.cpu, sum.rssKiB+s.rssKiB, sum.hwmKiB+s.hwmKiB
			sum.syscalls, sum.switches = sum.syscalls+s.syscalls, sum.switches+s.switches
		}
		return sum, nil
	}
	var s procSample
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return s, fmt.Errorf("bench: read process stat: %w", err)
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 and stime 15 (1-based).
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return s, fmt.Errorf("bench: short /proc/%s/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("bench: parse /proc/%s/stat", pid)
	}
	s.cpu = time.Duration(ut+st) * time.Second / clockTicks
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return s, fmt.Errorf("bench: read process status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "VmRSS":
			s.rssKiB = parseKiB(v)
		case "VmHWM":
			s.hwmKiB = parseKiB(v)
		}
	}
	s.syscalls, s.switches = readIO(pid), readSwitches(pid)
	return s, nil
}

// readIO returns the read and write system calls /proc/<pid>/io counts
// for all its threads.
func readIO(pid string) int64 {
	return sumFields("/proc/"+pid+"/io", "syscr", "syscw")
}

// readSwitches sums the context switches of pid's threads.
func readSwitches(pid string) int64 {
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range tasks {
		n += sumFields("/proc/"+pid+"/task/"+t.Name()+"/status", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
	}
	return n
}

// sumFields sums the integer fields named keys of a "key: value" file
// of /proc. A file that cannot be read counts 0 (a thread that ended):
// these counts are diagnostics.
func sumFields(path string, keys ...string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && slices.Contains(keys, k) {
			c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			n += c
		}
	}
	return n
}

func parseKiB(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n
}
