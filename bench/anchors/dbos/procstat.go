package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat; Linux fixes it at 100 for userspace.
const userHZ = 100

// procGroup measures a set of processes over a workload's repetitions: the peak resident memory
// (VmHWM, reset at begin through clear_refs) summed over the processes, and the CPU seconds they
// used in each repetition (lap), summed over the processes, whose median end reports. A process
// that starts after begin counts from zero; one that exits is lost from both sums.
//
// The sum of VmHWM counts memory the processes share (PostgreSQL's shared buffers, its binary
// and libraries) once per process. A group of several processes is therefore also sampled
// every pssInterval for the sum of their proportional set sizes (Pss of smaps_rollup, where a
// shared page counts 1/n in each of its n processes), whose peak is the memory the group holds
// together, to within what the sampling misses.
type procGroup struct {
	pids    func() []int
	sampled bool
	lastCPU map[int]float64
	laps    []float64
	stop    chan struct{}
	peakPss chan float64
}

const pssInterval = 250 * time.Millisecond

func newProcGroup(pids func() []int, sampled bool) *procGroup {
	return &procGroup{pids: pids, sampled: sampled}
}

// begin resets the processes' peak RSS to their current RSS, records their CPU time and starts
// the Pss sampling of a sampled group.
func (g *procGroup) begin() {
	for _, pid := range g.pids() {
		resetPeak(pid)
	}
	g.lastCPU, g.laps = g.cpu(), nil
	if g.sampled {
		g.stop, g.peakPss = make(chan struct{}), make(chan float64, 1)
		go g.samplePss()
	}
}

// lap ends a repetition: it records the CPU seconds the processes used since begin or the
// previous lap.
func (g *procGroup) lap() {
	now := g.cpu()
	used := 0.0
	for pid, c := range now {
		used += c - g.lastCPU[pid]
	}
	g.laps = append(g.laps, used)
	g.lastCPU = now
}

func (g *procGroup) cpu() map[int]float64 {
	out := map[int]float64{}
	for _, pid := range g.pids() {
		if c, err := cpuSeconds(pid); err == nil {
			out[pid] = c
		}
	}
	return out
}

func (g *procGroup) samplePss() {
	peak := 0.0
	t := time.NewTicker(pssInterval)
	defer t.Stop()
	for {
		sum := 0.0
		for _, pid := range g.pids() {
			if kb, err := rollupKiB(pid, "Pss"); err == nil {
				sum += float64(kb) / 1024
			}
		}
		peak = max(peak, sum)
		select {
		case <-g.stop:
			g.peakPss <- peak
			return
		case <-t.C:
		}
	}
}

// end returns the group's peak RSS since begin, the median CPU seconds of its laps, and the
// sampled peak Pss of a sampled group.
func (g *procGroup) end() procStats {
	var st procStats
	if g.sampled {
		close(g.stop)
		st.PeakPssMiB = round(<-g.peakPss)
	}
	for _, pid := range g.pids() {
		if kb, err := statusKiB(pid, "VmHWM"); err == nil {
			st.PeakRSSMiB += float64(kb) / 1024
		}
	}
	st.PeakRSSMiB = round(st.PeakRSSMiB)
	if len(g.laps) > 0 {
		st.CPUs = round(median(g.laps))
	}
	return st
}

// resetPeak sets the peak RSS of pid back to its current RSS (clear_refs value 5, Linux 4.0+).
// It needs the right to write the process's clear_refs (same user, or root); without it the
// peak stays the process's lifetime peak.
func resetPeak(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// statusKiB reads one "Name:   N kB" field of /proc/<pid>/status.
func statusKiB(pid int, field string) (int64, error) {
	return fieldKiB(fmt.Sprintf("/proc/%d/status", pid), field)
}

// rollupKiB reads one "Name:   N kB" field of /proc/<pid>/smaps_rollup.
func rollupKiB(pid int, field string) (int64, error) {
	return fieldKiB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), field)
}

func fieldKiB(path, field string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		v := strings.TrimSuffix(strings.TrimSpace(rest), " kB")
		return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	}
	return 0, fmt.Errorf("%s not in %s", field, path)
}

// statFields returns the fields of /proc/<pid>/stat after the command name, so that index 0 is
// the state (field 3 of proc(5)), index 1 the parent PID, index 11 utime and index 12 stime.
func statFields(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return f, nil
}

// cpuSeconds is utime + stime of pid.
func cpuSeconds(pid int) (float64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed cpu times in /proc/%d/stat", pid)
	}
	return (u + s) / userHZ, nil
}

// withChildren returns pid and the PIDs of its direct children (a postmaster's backends and
// auxiliary processes).
func withChildren(pid int) []int {
	out := []int{pid}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil || child == pid {
			continue
		}
		f, err := statFields(child)
		if err != nil {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}
