package streams

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Rollups. A message with the Nats-Rollup header purges, as JetStream stores it, the earlier
// messages of its subject ("sub") or of its whole stream ("all"), on a stream that allows rollups
// (StreamConfig.AllowRollup). No NATS permission covers headers, so on such a stream any user
// that may publish one message to it may purge all of it without the purge permission. nats.go
// creates every bucket and object store allowing rollups; Flow turns them off on every one but
// the object stores in RollupsNeeded and the buckets with limit markers:
//
//   - its buckets: nats.go's KeyValue uses the header only in Purge, which Flow never calls (it
//     deletes keys, with a delete marker). But nats-server keeps rollups allowed on a stream
//     with subject delete markers (KeyValueConfig.LimitMarkerTTL), whatever its configuration
//     asks: FLOW_WORKERS (written by the workers) and FLOW_START_KEYS (by the history service)
//     keep them (docs/operations.md, "What the permissions cannot stop");
//   - OBJ_FLOW_PAYLOADS: its writers (internal/payload/objstore) write an object's metadata
//     without it, every reader reads the last metadata message of a name, and the history
//     service's payload collector purges the superseded ones.
//
// Ensure turns rollups off on the streams it creates or updates; Provision also on existing
// ones, so that the history service's start upgrades streams created before.

// RollupsNeeded names the object stores whose stream keeps allowing rollups: the ones written with
// nats.go's ObjectStore.Put, which rolls up an object's metadata, and written by the history
// service alone (internal/natsperm), whose NATS user may purge them anyway.
var RollupsNeeded = map[string]bool{ArchiveBucket: true, CheckpointsBucket: true}

// noRollups makes stream name allow no rollups, if it does and has no subject delete markers
// (nats-server would allow them again, and each Provision would update the stream in vain).
func noRollups(ctx context.Context, js jetstream.JetStream, name string) error {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", name, err)
	}
	cfg := st.CachedInfo().Config
	if !cfg.AllowRollup || cfg.SubjectDeleteMarkerTTL > 0 {
		return nil
	}
	cfg.AllowRollup = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("turning rollups off on stream %s: %w", name, err)
	}
	return nil
}
