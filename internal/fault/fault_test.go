package fault_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/fault"
)

func TestInjector(t *testing.T) {
	t.Parallel()
	var none *fault.Injector
	require.NoError(t, none.Hit(fault.TimerPut), "a nil injector never fails")

	f := &fault.Injector{}
	require.NoError(t, f.Hit(fault.TimerPut))
	f.Arm(fault.TimerPut, fault.Fail, 1, 2)
	var got []bool
	for range 5 {
		got = append(got, errors.Is(f.Hit(fault.TimerPut), fault.ErrInjected))
	}
	require.Equal(t, []bool{false, true, true, false, false}, got, "skip 1, then fail twice")
	require.Equal(t, 6, f.Hits(fault.TimerPut))

	f.ArmEvery(fault.IndexPut, fault.Fail, 3, 2)
	got = nil
	for range 9 {
		got = append(got, f.Hit(fault.IndexPut) != nil)
	}
	require.Equal(t, []bool{false, false, true, false, false, true, false, false, false}, got, "every third hit, twice")

	ran := 0
	f.ArmFunc(fault.PayloadGCBeforeDelete, 2, func() { ran++ })
	for range 3 {
		require.NoError(t, f.Hit(fault.PayloadGCBeforeDelete), "a function armed at a point runs and the caller goes on")
	}
	require.Equal(t, 2, ran, "twice, then disarmed")
}

func TestFromEnv(t *testing.T) {
	t.Setenv(fault.EnvVar, "after-append-before-task:fail:1:1, timer-put:fail")
	f, err := fault.FromEnv()
	require.NoError(t, err)
	require.NoError(t, f.Hit(fault.AfterAppendBeforeTask))
	require.ErrorIs(t, f.Hit(fault.AfterAppendBeforeTask), fault.ErrInjected)
	require.NoError(t, f.Hit(fault.AfterAppendBeforeTask))
	require.Error(t, f.Hit(fault.TimerPut))

	// Every point of the package may be armed, those of features included.
	for _, p := range fault.All() {
		t.Setenv(fault.EnvVar, string(p)+":kill:2")
		_, err := fault.FromEnv()
		require.NoError(t, err, p)
	}
	require.Contains(t, fault.All(), fault.ScheduleBeforeStart)

	for _, bad := range []string{"nowhere:fail", "timer-put:explode", "timer-put", "timer-put:fail:x"} {
		t.Setenv(fault.EnvVar, bad)
		_, err := fault.FromEnv()
		require.Error(t, err, bad)
	}
	t.Setenv(fault.EnvVar, "")
	f, err = fault.FromEnv()
	require.NoError(t, err)
	require.Nil(t, f)
}
