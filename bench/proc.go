package bench

import (
	"fmt"
	"os"
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
	return s, nil
}

func parseKiB(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n
}
