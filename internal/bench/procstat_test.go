package bench

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseStatus(t *testing.T) {
	status := "Name:\tflowbench\nVmPeak:\t 2000 kB\nVmHWM:\t   61440 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n"
	m, err := parseStatus([]byte(status))
	require.NoError(t, err)
	require.Equal(t, procMem{RSS: 40960, HWM: 61440}, m)
	require.Equal(t, 60.0, mib(m.HWM))

	_, err = parseStatus([]byte("Name:\tkthreadd\n"))
	require.Error(t, err, "a kernel thread has no VmRSS")
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       float64
	}{
		{"plain", "42 (nats-server) S 1 42 42 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 9 0 100 0 0", 3.25},
		{"a command with spaces and parentheses", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 0", 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.stat))
			require.NoError(t, err)
			require.InDelta(t, tc.want, got, 1e-9)
		})
	}
	_, err := parseStat([]byte("7 (x) R 1"))
	require.Error(t, err)
}

func TestOwnProcess(t *testing.T) {
	m, err := readMem(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, m.RSS)
	require.GreaterOrEqual(t, m.HWM, m.RSS)
	_, err = cpuSeconds(os.Getpid())
	require.NoError(t, err)
}
