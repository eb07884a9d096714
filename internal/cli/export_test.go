package cli

import "testing"

// RequireFails is requireFails, for the tests in package cli_test.
var RequireFails = requireFails

// FreePort is unusedPort, for the tests in package cli_test.
var FreePort = unusedPort

// Run is runCLI, for the tests in package cli_test: Main's exit code and what it wrote.
func Run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	r := runCLI(t, args...)
	return r.code, r.stdout, r.stderr
}
