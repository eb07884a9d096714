package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/pkg/flow"
)

// timeoutFlags are the run timeout flags of `flow start` (docs/timeouts.md).
type timeoutFlags struct {
	execution, run time.Duration
}

func (f *timeoutFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&f.execution, "execution-timeout", 0, "fail the run, and the runs it continues as, this long after this start (default: the definition's, else none)")
	fl.DurationVar(&f.run, "run-timeout", 0, "fail the run this long after its start; each continuation counts afresh (default: the definition's, else none)")
}

func (f *timeoutFlags) apply(o *flow.StartOptions) error {
	if f.execution < 0 || f.run < 0 {
		return usageError{fmt.Errorf("--execution-timeout and --run-timeout must not be negative")}
	}
	o.ExecutionTimeout, o.RunTimeout = f.execution, f.run
	return nil
}

// printTimeouts prints the run's timeouts and their deadlines.
func printTimeouts(w io.Writer, s *flow.Snapshot) {
	t := s.Timeouts
	if t == nil {
		return
	}
	if t.Execution > 0 {
		fmt.Fprintf(w, "Timeout     execution %s, fails at %s\n", time.Duration(t.Execution), t.ExecutionDeadline.Format(time.RFC3339Nano))
	}
	if t.Run > 0 {
		fmt.Fprintf(w, "Timeout     run %s, fails at %s\n", time.Duration(t.Run), t.RunDeadline.Format(time.RFC3339Nano))
	}
}
