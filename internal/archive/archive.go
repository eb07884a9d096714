// Package archive keeps the whole history of runs whose retention period passed, before the
// retention sweeper deletes them from FLOW_HISTORY (docs/retention.md): in the JetStream Object
// Store bucket FLOW_ARCHIVE, one object per run, or in a directory, one file per run.
//
// An archive is self-contained: it holds the run's envelopes as history stored them
// (references to offloaded payloads included), and the bytes of every offloaded payload they
// refer to, so that once the run is deleted nothing it needs is left in FLOW_PAYLOADS, and the
// payload collector may delete what no retained history refers to (format.go says how it is
// encoded). Reading an archive returns the history exactly as it was read before the deletion.
//
// Writing an archive is idempotent: a sweeper that dies after writing it and writes it again
// leaves the same object. Each archive's location is a string, kept in the run's tombstone
// ("objectstore:FLOW_ARCHIVE/<run>", "dir:/var/lib/flow/archive/<run>.json"): the history is read
// from where it was written, whatever the configuration says later.
package archive

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/payload"
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

// Payloads reads the offloaded payloads a history refers to, for its archive. It returns the
// payload's bytes (checked against r), or nil and no error for a payload that is lost: the
// archive then holds the reference without its bytes. Any other error stops the write.
type Payloads func(ctx context.Context, r payload.Ref) ([]byte, error)

// Archive writes runs' histories somewhere they outlive FLOW_HISTORY.
type Archive interface {
	// Put writes run runID's whole history, with every offloaded payload its events refer to,
	// read by payloads (nil: none), replacing an earlier archive of the run, and returns its
	// location, for the run's tombstone and Read.
	Put(ctx context.Context, runID string, hist []event.Envelope, payloads Payloads) (string, error)
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

// Contents is an archive read whole.
type Contents struct {
	// History is the run's history as stored, references to offloaded payloads included.
	History []event.Envelope
	// Payloads holds the bytes of the offloaded payloads History refers to, by their hex
	// SHA-256, each checked against it. It lacks those lost before the run was archived, and
	// every payload of an archive that is not SelfContained.
	Payloads map[string][]byte
	// SelfContained is false for an archive written before archives held payloads (a bare JSON
	// array of envelopes): its references point into FLOW_PAYLOADS.
	SelfContained bool
}

// Read returns the history archived at location where (as Put returned it), references to
// offloaded payloads included, as history stored it. It reads none of the payloads.
func Read(ctx context.Context, js jetstream.JetStream, where string) ([]event.Envelope, error) {
	c, err := read(ctx, js, where, false)
	if err != nil {
		return nil, err
	}
	return c.History, nil
}

// ReadAll returns the archive at location where, the payloads it holds included.
func ReadAll(ctx context.Context, js jetstream.JetStream, where string) (*Contents, error) {
	return read(ctx, js, where, true)
}

// SelfContained reports whether the archive at where holds the payloads its history refers to
// (it was written by this version), cheaply: it reads an object's metadata, or a file's first
// bytes.
func SelfContained(ctx context.Context, js jetstream.JetStream, where string) (bool, error) {
	loc, err := parse(where)
	if err != nil {
		return false, err
	}
	if loc.dir != "" {
		f, err := os.Open(loc.file)
		if errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("%w: %v", ErrNotArchived, err)
		}
		if err != nil {
			return false, fmt.Errorf("archive: reading %s: %w", where, err)
		}
		defer f.Close()
		c, err := firstByte(bufio.NewReader(f))
		if err != nil {
			return false, fmt.Errorf("archive: reading %s: %w", where, err)
		}
		return c == '{', nil
	}
	obs, err := js.ObjectStore(ctx, loc.bucket)
	if err != nil {
		return false, fmt.Errorf("archive: opening object store %s: %w", loc.bucket, err)
	}
	info, err := obs.GetInfo(ctx, loc.name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, fmt.Errorf("%w: no object %s in %s", ErrNotArchived, loc.name, loc.bucket)
	}
	if err != nil {
		return false, fmt.Errorf("archive: reading %s: %w", where, err)
	}
	return info.Metadata[formatKey] == formatValue, nil
}

// Rewrite writes the archive at where again, self-contained: its history as it is, with the
// payloads it refers to read by payloads. It upgrades an archive written before archives held
// payloads, in place (the location, which tombstones keep, does not change).
func Rewrite(ctx context.Context, js jetstream.JetStream, where string, hist []event.Envelope, payloads Payloads) error {
	loc, err := parse(where)
	if err != nil {
		return err
	}
	if loc.dir != "" {
		return writeFile(ctx, loc.dir, loc.file, hist, payloads)
	}
	obs, err := js.ObjectStore(ctx, loc.bucket)
	if err != nil {
		return fmt.Errorf("archive: opening object store %s: %w", loc.bucket, err)
	}
	return putObject(ctx, obs, loc.name, hist, payloads)
}

// location is a parsed archive location: an object (bucket, name) or a file (dir, file).
type location struct {
	bucket, name string
	dir, file    string
}

func parse(where string) (location, error) {
	switch {
	case strings.HasPrefix(where, ObjectStore+":"):
		bucket, name, ok := strings.Cut(strings.TrimPrefix(where, ObjectStore+":"), "/")
		if !ok || name == "" {
			return location{}, fmt.Errorf("archive: %q names no object", where)
		}
		return location{bucket: bucket, name: name}, nil
	case strings.HasPrefix(where, DirPrefix) && len(where) > len(DirPrefix):
		file := strings.TrimPrefix(where, DirPrefix)
		return location{dir: filepath.Dir(file), file: file}, nil
	}
	return location{}, fmt.Errorf("archive: %q is not an archive location", where)
}

func read(ctx context.Context, js jetstream.JetStream, where string, all bool) (*Contents, error) {
	loc, err := parse(where)
	if err != nil {
		return nil, err
	}
	var r io.ReadCloser
	if loc.dir != "" {
		f, err := os.Open(loc.file)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %v", ErrNotArchived, err)
		}
		if err != nil {
			return nil, fmt.Errorf("archive: reading %s: %w", where, err)
		}
		r = f
	} else {
		obs, err := js.ObjectStore(ctx, loc.bucket)
		if err != nil {
			return nil, fmt.Errorf("archive: opening object store %s: %w", loc.bucket, err)
		}
		res, err := obs.Get(ctx, loc.name)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, fmt.Errorf("%w: no object %s in %s", ErrNotArchived, loc.name, loc.bucket)
		}
		if err != nil {
			return nil, fmt.Errorf("archive: reading %s: %w", where, err)
		}
		r = res
	}
	defer r.Close()
	c, err := decode(r, all)
	if err != nil {
		return nil, fmt.Errorf("archive: %s does not decode: %w", where, err)
	}
	return c, nil
}

type objectArchive struct{ obs jetstream.ObjectStore }

func (a objectArchive) Put(ctx context.Context, runID string, hist []event.Envelope, payloads Payloads) (string, error) {
	if err := putObject(ctx, a.obs, runID, hist, payloads); err != nil {
		return "", fmt.Errorf("archive: writing run %q to %s: %w", runID, Bucket, err)
	}
	return ObjectStore + ":" + Bucket + "/" + runID, nil
}

// putObject writes the archive as object name of obs, as it encodes it: the payloads are read
// one at a time, never all held at once.
func putObject(ctx context.Context, obs jetstream.ObjectStore, name string, hist []event.Envelope, payloads Payloads) error {
	pr, pw := io.Pipe()
	wrote := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(pw, 64<<10)
		err := encode(ctx, bw, hist, payloads)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err) // nil: the reader sees EOF
		wrote <- err
	}()
	meta := jetstream.ObjectMeta{Name: name, Description: "Flow run archive", Metadata: map[string]string{formatKey: formatValue}}
	_, err := obs.Put(ctx, meta, pr)
	pr.CloseWithError(errStopped) // unblocks the writer if the store stopped reading
	if werr := <-wrote; werr != nil && !errors.Is(werr, errStopped) {
		return werr // the encoding failed (a payload did not read), and so the put
	}
	return err
}

// errStopped is what the encoder of an archive meets when the object store stops reading it.
var errStopped = errors.New("archive: the object store stopped reading")

type dirArchive struct{ dir string }

// maxFileName bounds a file's name without its ".json": a derived run ID may be longer than a
// file system takes, and is then cut and suffixed with its digest.
const maxFileName = 200

// Put writes the archive to a temporary file, syncs it and renames it into place, so that a
// crash leaves the whole archive or none.
func (a dirArchive) Put(ctx context.Context, runID string, hist []event.Envelope, payloads Payloads) (string, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return "", err
	}
	name := runID
	if len(name) > maxFileName {
		sum := sha256.Sum256([]byte(runID))
		name = name[:maxFileName-33] + "~" + hex.EncodeToString(sum[:16])
	}
	path := filepath.Join(a.dir, name+".json")
	if err := writeFile(ctx, a.dir, path, hist, payloads); err != nil {
		return "", fmt.Errorf("archive: writing run %q: %w", runID, err)
	}
	return DirPrefix + path, nil
}

// writeFile writes the archive to a temporary file in dir, syncs it and renames it to path.
func writeFile(ctx context.Context, dir, path string, hist []event.Envelope, payloads Payloads) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	err = encode(ctx, bw, hist, payloads)
	if err == nil {
		err = bw.Flush()
	}
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
		return err
	}
	return nil
}
