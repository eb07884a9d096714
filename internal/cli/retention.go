package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
)

// deletedText is the DETAIL of a tombstone in `flow runs --include-deleted`.
func deletedText(d *flow.RunDeletion) string {
	where := "not archived"
	if d.Archive != "" {
		where = "archived: " + d.Archive
	}
	if !d.Purged {
		where += ", purge pending"
	}
	return fmt.Sprintf("DELETED %s (%s)", d.At.UTC().Format(time.RFC3339), where)
}

// noteArchived tells, on stderr, that the history `flow history` printed was read from the
// archive of a deleted run.
func (e *env) noteArchived(ctx context.Context, client *flow.Client, runID string) {
	d, err := client.Deletion(ctx, runID)
	if err != nil || d == nil {
		return
	}
	fmt.Fprintf(e.stderr, "run %s was deleted at %s (%s); this history is read from its archive %s\n",
		runID, d.At.UTC().Format(time.RFC3339), d.Reason, d.Archive)
}

// devRetention sets `flow dev`'s retention sweeper and payload collector from the environment,
// as flowd history reads them: FLOW_RETENTION (default 720h), FLOW_RETENTION_SWEEP (default
// 1m), FLOW_ARCHIVE (objectstore, dir:/path or off), FLOW_PAYLOAD_GC_INTERVAL (default 1h) and
// FLOW_PAYLOAD_GC_GRACE (default 1h).
func devRetention(cfg *history.Config) error {
	for name, d := range map[string]*time.Duration{"FLOW_RETENTION": &cfg.Retention, "FLOW_RETENTION_SWEEP": &cfg.RetentionSweep,
		"FLOW_PAYLOAD_GC_INTERVAL": &cfg.PayloadGCInterval, "FLOW_PAYLOAD_GC_GRACE": &cfg.PayloadGCGrace} {
		if v := os.Getenv(name); v != "" {
			var err error
			if *d, err = time.ParseDuration(v); err != nil {
				return usageError{fmt.Errorf("%s must be a duration such as 720h, got %q", name, v)}
			}
		}
	}
	if v := os.Getenv("FLOW_ARCHIVE"); v != "" {
		if v != archive.ObjectStore && v != archive.Off && len(v) <= len(archive.DirPrefix) {
			return usageError{fmt.Errorf("FLOW_ARCHIVE must be objectstore, dir:/path or off, got %q", v)}
		}
		cfg.Archive = v
	}
	return nil
}
