package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// procMem is a process's resident memory from /proc/<pid>/status, in KiB.
type procMem struct {
	RSS, HWM int64 // VmRSS, VmHWM (peak resident set)
}

func readMem(pid int) (procMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}, err
	}
	return parseStatus(b)
}

// parseStatus reads VmRSS and VmHWM of a /proc/<pid>/status file.
func parseStatus(b []byte) (procMem, error) {
	var m procMem
	var found int
	for line := range bytes.Lines(b) {
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(name) {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.HWM
		default:
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) == 0 {
			return m, fmt.Errorf("%s: no value", name)
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
		*dst = v
		found++
	}
	if found < 2 {
		return m, fmt.Errorf("no VmRSS and VmHWM in status")
	}
	return m, nil
}

// resetPeak sets the process's VmHWM back to its current RSS (clear_refs value 5, Linux 4.0 and
// later).
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// cpuSeconds returns the user plus system CPU time the process has used.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

// parseStat reads utime+stime (fields 14 and 15) of a /proc/<pid>/stat line, in seconds. The
// command name, field 2, is in parentheses and may hold spaces and parentheses itself.
func parseStat(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: %w", err)
		}
		ticks += v
	}
	return float64(ticks) / clockTicks, nil
}

// watched is one process whose peak memory and CPU a workload reports.
type watched struct {
	name string // "nats" or "flow"
	pid  int
	// peakSinceStart is set once resetting the peak failed: VmHWM then is the peak since the
	// process started.
	peakSinceStart bool
}

// reset starts a new peak-memory window, or marks the peak as since the start.
func (w *watched) reset() {
	if err := resetPeak(w.pid); err != nil {
		w.peakSinceStart = true
	}
}

func mib(kib int64) float64 { return float64(kib) / 1024 }
