// Command flow runs Flow on one machine (flow dev) and drives and inspects runs.
package main

import (
	"context"
	"os"

	"github.com/flowrun/flow/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
