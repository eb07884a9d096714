package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/engine"
)

// Checkpoints stores snapshot checkpoints in a JetStream Object Store bucket
// (streams.CheckpointsBucket): one object per run, named by its run ID, that each checkpoint of
// the run replaces (the object store keeps the last meta message per name and purges the
// replaced object's chunks). The checked fields are the object's metadata. It implements
// engine.CheckpointReader; its writes (Save, Delete) are the history service's alone, the
// bucket's one writer.
type Checkpoints struct {
	obs   jetstream.ObjectStore
	chunk uint32
}

// Metadata keys of a checkpoint object.
const (
	metaSeq      = "flow-seq"
	metaTime     = "flow-time"
	metaPosition = "flow-position"
)

// OpenCheckpoints returns the checkpoint store on bucket, which must exist.
func OpenCheckpoints(ctx context.Context, js jetstream.JetStream, bucket string) (*Checkpoints, error) {
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("opening the checkpoint store %s: %w", bucket, err)
	}
	chunk := uint32(chunkSize)
	if mp := js.Conn().MaxPayload(); mp > 0 && int64(chunk) > mp/2 {
		chunk = uint32(mp / 2)
	}
	return &Checkpoints{obs: obs, chunk: chunk}, nil
}

// Save implements engine.Checkpoints.
func (c *Checkpoints) Save(ctx context.Context, cp engine.Checkpoint) error {
	meta := jetstream.ObjectMeta{Name: cp.RunID, Description: "Flow snapshot checkpoint",
		Metadata: map[string]string{
			metaSeq:      strconv.FormatUint(cp.Seq, 10),
			metaTime:     cp.Time.UTC().Format(time.RFC3339Nano),
			metaPosition: strconv.FormatUint(cp.Position, 10),
		},
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: c.chunk}}
	if _, err := c.obs.Put(ctx, meta, bytes.NewReader(cp.Snapshot)); err != nil {
		return fmt.Errorf("writing the checkpoint of run %q at seq %d: %w", cp.RunID, cp.Seq, err)
	}
	return nil
}

// Latest implements engine.Checkpoints.
func (c *Checkpoints) Latest(ctx context.Context, runID string) (*engine.Checkpoint, error) {
	res, err := c.obs.Get(ctx, runID)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint of run %q: %w", runID, err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return nil, err
	}
	cp, err := checkpointOf(info)
	if err != nil {
		return nil, err
	}
	cp.Snapshot = make([]byte, info.Size)
	if _, err := io.ReadFull(res, cp.Snapshot); err != nil {
		return nil, fmt.Errorf("reading the checkpoint of run %q: %w", runID, err)
	}
	if n, err := res.Read(make([]byte, 1)); n != 0 || err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading the checkpoint of run %q: %w", runID, errors.Join(err, errors.New("more bytes than its size")))
	}
	return cp, nil
}

// Delete removes run runID's checkpoint, if any (retention deletes it with the run's history).
func (c *Checkpoints) Delete(ctx context.Context, runID string) error {
	err := c.obs.Delete(ctx, runID)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	return err
}

// checkpointOf reads a checkpoint object's metadata: the checkpoint without its snapshot.
func checkpointOf(info *jetstream.ObjectInfo) (*engine.Checkpoint, error) {
	cp := &engine.Checkpoint{RunID: info.Name}
	var err error
	if cp.Seq, err = strconv.ParseUint(info.Metadata[metaSeq], 10, 64); err == nil {
		if cp.Position, err = strconv.ParseUint(info.Metadata[metaPosition], 10, 64); err == nil {
			cp.Time, err = time.Parse(time.RFC3339Nano, info.Metadata[metaTime])
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: the checkpoint of run %q: %w", ErrMalformedCheckpoint, info.Name, err)
	}
	return cp, nil
}

// ErrMalformedCheckpoint is wrapped by the error of a read of a checkpoint object whose metadata
// do not say what it covers: a reader does not use it, and the history service replaces it.
var ErrMalformedCheckpoint = errors.New("malformed checkpoint metadata")

// Info returns run runID's checkpoint without its snapshot (one read of the object's metadata),
// or nil when it has none.
func (c *Checkpoints) Info(ctx context.Context, runID string) (*engine.Checkpoint, error) {
	info, err := c.obs.GetInfo(ctx, runID)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint of run %q: %w", runID, err)
	}
	return checkpointOf(info)
}

// Runs returns the run IDs of the runs that have a checkpoint.
func (c *Checkpoints) Runs(ctx context.Context) ([]string, error) {
	infos, err := c.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the checkpoints: %w", err)
	}
	ids := make([]string, len(infos))
	for i, info := range infos {
		ids[i] = info.Name
	}
	return ids, nil
}

var _ engine.CheckpointReader = (*Checkpoints)(nil)
