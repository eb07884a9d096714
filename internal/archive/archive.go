// Package archive keeps the whole history of runs whose retention period passed, before the
// retention sweeper deletes them from FLOW_HISTORY (docs/retention.md): in the JetStream Object
// Store bucket FLOW_ARCHIVE, one object per run, or in a directory, one file per run. An archive
// is the run's envelopes as one JSON array, in the form of a history commit's body
// (event.MarshalEnvelopes), so that `flow history` reads it back as it reads the stream.
//
// Writing an archive is idempotent: a sweeper that dies after writing it and writes it again
// leaves the same object. Each archive's location is a string, kept in the run's tombstone
// ("objectstore:FLOW_ARCHIVE/<run>", "dir:/var/lib/flow/archive/<run>.json"): the history is read
// from where it was written, whatever the configuration says later.
package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

// Bucket is the Object Store bucket of archived histories.
const Bucket = streams.ArchiveBucket

// ErrNotArchived is wrapped by the errors of reading an archive that does not exist.
var ErrNotArchived = errors.New("flow: the run's archive does not exist")

// Spec values of Config.
const (
	// ObjectStore archives to the FLOW_ARCHIVE Object Store bucket: the default.
	ObjectStore = "objectstore"
	// Off deletes histories without archiving them.
	Off = "off"
	// DirPrefix, followed by a path, archives to files in that directory.
	DirPrefix = "dir:"
)

// Archive writes runs' histories somewhere they outlive FLOW_HISTORY.
type Archive interface {
	// Put writes run runID's whole history, replacing an earlier archive of it, and returns its
	// location, for the run's tombstone and Read.
	Put(ctx context.Context, runID string, hist []event.Envelope) (string, error)
}

// Open returns the archive spec names: "objectstore" (or "": FLOW_ARCHIVE), "dir:<path>" (the
// directory is created), or "off" (nil: no archive). The Object Store bucket must exist
// (streams.Ensure creates it).
func Open(ctx context.Context, js jetstream.JetStream, spec string) (Archive, error) {
	switch {
	case spec == "" || spec == ObjectStore:
		obs, err := js.ObjectStore(ctx, Bucket)
		if err != nil {
			return nil, fmt.Errorf("archive: opening object store %s: %w", Bucket, err)
		}
		return objectArchive{obs: obs}, nil
	case spec == Off:
		return nil, nil
	case strings.HasPrefix(spec, DirPrefix):
		dir := strings.TrimPrefix(spec, DirPrefix)
		if dir == "" || !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("archive: %q must name an absolute directory, such as dir:/var/lib/flow/archive", spec)
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		return dirArchive{dir: filepath.Clean(dir)}, nil
	}
	return nil, fmt.Errorf("archive: %q is not an archive; use objectstore, dir:/path or off", spec)
}

// Read returns the history archived at location where (as Put returned it).
func Read(ctx context.Context, js jetstream.JetStream, where string) ([]event.Envelope, error) {
	var (
		b   []byte
		err error
	)
	switch {
	case strings.HasPrefix(where, ObjectStore+":"):
		bucket, name, ok := strings.Cut(strings.TrimPrefix(where, ObjectStore+":"), "/")
		if !ok || name == "" {
			return nil, fmt.Errorf("archive: %q names no object", where)
		}
		obs, oerr := js.ObjectStore(ctx, bucket)
		if oerr != nil {
			return nil, fmt.Errorf("archive: opening object store %s: %w", bucket, oerr)
		}
		b, err = obs.GetBytes(ctx, name)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, fmt.Errorf("%w: no object %s in %s", ErrNotArchived, name, bucket)
		}
	case strings.HasPrefix(where, DirPrefix):
		b, err = os.ReadFile(strings.TrimPrefix(where, DirPrefix))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %v", ErrNotArchived, err)
		}
	default:
		return nil, fmt.Errorf("archive: %q is not an archive location", where)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: reading %s: %w", where, err)
	}
	hist, err := event.DecodeEnvelopes(b)
	if err != nil {
		return nil, fmt.Errorf("archive: %s does not decode: %w", where, err)
	}
	return hist, nil
}

type objectArchive struct{ obs jetstream.ObjectStore }

func (a objectArchive) Put(ctx context.Context, runID string, hist []event.Envelope) (string, error) {
	b, err := event.MarshalEnvelopes(hist)
	if err != nil {
		return "", err
	}
	if _, err := a.obs.PutBytes(ctx, runID, b); err != nil {
		return "", fmt.Errorf("archive: writing run %q to %s: %w", runID, Bucket, err)
	}
	return ObjectStore + ":" + Bucket + "/" + runID, nil
}

type dirArchive struct{ dir string }

// maxFileName bounds a file's name without its ".json": a derived run ID may be longer than a
// file system takes, and is then cut and suffixed with its digest.
const maxFileName = 200

// Put writes the archive to a temporary file, syncs it and renames it into place, so that a
// crash leaves the whole archive or none.
func (a dirArchive) Put(_ context.Context, runID string, hist []event.Envelope) (string, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return "", err
	}
	b, err := event.MarshalEnvelopes(hist)
	if err != nil {
		return "", err
	}
	name := runID
	if len(name) > maxFileName {
		sum := sha256.Sum256([]byte(runID))
		name = name[:maxFileName-33] + "~" + hex.EncodeToString(sum[:16])
	}
	path := filepath.Join(a.dir, name+".json")
	f, err := os.CreateTemp(a.dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("archive: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("archive: writing run %q: %w", runID, err)
	}
	return DirPrefix + path, nil
}
