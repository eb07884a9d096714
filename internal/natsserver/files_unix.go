//go:build unix

package natsserver

import "syscall"

// raiseFileLimit raises the soft limit of open files to the hard limit (Go's runtime does so
// at start on most systems already) and returns it.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = want.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			lim = want
		}
	}
	return uint64(lim.Cur), nil
}
