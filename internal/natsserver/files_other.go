//go:build !unix

package natsserver

import "math"

// raiseFileLimit reports no limit where the system has no RLIMIT_NOFILE.
func raiseFileLimit() (uint64, error) { return math.MaxUint64, nil }
