package cli

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is the release this binary was built as, set when linking with
//
//	go build -ldflags "-X github.com/flowrun/flow/internal/cli.version=v1.2.3" ./cmd/flow
//
// Empty means the module version from the build information (set by `go install
// module@version`), or "(devel)" for a build from a work tree.
var version string

// buildInfo is what `flow version` reports about the binary.
type buildInfo struct {
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, Time its commit time (RFC 3339),
	// Modified whether the work tree had uncommitted changes; empty when the build did not
	// record them (go test, or go build -buildvcs=false).
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
}

// readBuildInfo describes the binary from the linked-in version (ldflags, which wins when set)
// and bi, the build information Go records (nil if there is none).
func readBuildInfo(ldVersion string, bi *debug.BuildInfo) buildInfo {
	info := buildInfo{Version: ldVersion}
	if bi != nil {
		if info.Version == "" {
			info.Version = bi.Main.Version
		}
		info.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}

// currentBuild describes this binary.
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return readBuildInfo(version, bi)
}

// String is one line: "flow v1.2.3 (commit 0123abcd, 2026-12-01T10:31:02Z, modified; go1.26.0)",
// with what the build did not record left out.
func (b buildInfo) String() string {
	var details []string
	if b.Revision != "" {
		rev := b.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		details = append(details, "commit "+rev)
	}
	if b.Time != "" {
		details = append(details, b.Time)
	}
	if b.Modified {
		details = append(details, "modified")
	}
	s := "flow " + b.Version
	switch {
	case len(details) > 0 && b.GoVersion != "":
		s += fmt.Sprintf(" (%s; %s)", strings.Join(details, ", "), b.GoVersion)
	case len(details) > 0:
		s += " (" + strings.Join(details, ", ") + ")"
	case b.GoVersion != "":
		s += " (" + b.GoVersion + ")"
	}
	return s
}

func (e *env) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this flow binary",
		Long: `Print the version of this flow binary, with the commit it was built from when the build
recorded it (as 'flow --version' does). --json prints
{"version","revision","time","modified","go_version"}, leaving out what was not recorded.`,
		Args: args(),
		RunE: func(*cobra.Command, []string) error {
			b := currentBuild()
			if e.json {
				return writeJSON(e.stdout, b)
			}
			_, err := fmt.Fprintln(e.stdout, b)
			return err
		},
	}
}
