package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Names are the JetStream streams Ensure creates with one history partition: Flow's streams,
// then one KV_<bucket> stream per bucket, then one OBJ_<bucket> stream per object store.
// Layout.Names lists them for a layout.
var Names = []string{History, Tasks, DeadLetter,
	"KV_" + TimersBucket, "KV_" + HooksBucket, "KV_" + RunsBucket, "KV_" + DefinitionsBucket,
	"KV_" + LeasesBucket, "KV_" + ParkedBucket, "KV_" + DamagedBucket, "KV_" + WorkersBucket,
	"KV_" + StartKeysBucket, "KV_" + LimitsBucket, "KV_" + QueueBucket,
	"KV_" + HeartbeatsBucket, "OBJ_" + ArchiveBucket, "KV_" + SchedulesBucket,
	"KV_" + BatchesBucket,
	"KV_" + PausesBucket, "OBJ_" + PayloadsBucket, "OBJ_" + CheckpointsBucket,
	"KV_" + StepLimitsBucket, "KV_" + SecretsBucket}

// Names returns the JetStream streams Ensure creates in layout l: Names with its history
// streams in place of History.
func (l Layout) Names() []string { return append(l.Streams(), Names[1:]...) }

// Missing returns the streams of Names (of the existing layout) that do not exist, in that
// order.
func Missing(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	layout, _, err := Discover(ctx, js)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, name := range layout.Names() {
		_, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			missing = append(missing, name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w", name, err)
		}
	}
	return missing, nil
}

// AwaitProvisioned returns once every stream of Names exists, checking every interval. Before
// each wait it calls waiting with what is missing, or with the error that kept the check from
// telling (JetStream not ready yet, no answer). It is for processes whose NATS user may read
// Flow's streams but not create them: in Flow's deployments only the history service's user
// creates them (see internal/natsperm). It returns ctx's error if ctx ends first.
func AwaitProvisioned(ctx context.Context, js jetstream.JetStream, interval time.Duration, waiting func(missing []string, err error)) error {
	for {
		checkCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		missing, err := Missing(checkCtx, js)
		cancel()
		if err == nil && len(missing) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if waiting != nil {
			waiting(missing, err)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
