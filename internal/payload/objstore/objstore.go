// Package objstore is the content-addressed payload store on a JetStream Object Store bucket.
package objstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/payload"
)

// DefaultCacheBytes bounds the payloads a Store keeps in memory after reading them: 64 MiB.
// A payload larger than a quarter of it is not kept (each read of it reads the store).
const DefaultCacheBytes = 64 << 20

// chunkSize is the object chunk size: fewer, larger messages than the client's 128 KiB
// default, well under the default max_payload of 1 MiB.
const chunkSize = 512 << 10

// Store is the content-addressed payload store on a JetStream Object Store bucket
// (streams.PayloadsBucket): objects named by the hex SHA-256 of their bytes. It implements
// payload.Putter and payload.Getter and is safe for concurrent use.
type Store struct {
	obs       jetstream.ObjectStore
	threshold int
	chunk     uint32

	mu    sync.Mutex
	cache map[string][]byte
	order []string
	bytes int
	limit int
	// known remembers payloads this store wrote or read, so that writing one again needs no
	// request.
	known map[string]struct{}
}

// Open returns the store on bucket, which must exist (streams.Ensure creates it). threshold is
// the size above which payloads are offloaded (<= 0: payload.DefaultThreshold); it must be below the
// server's max_payload minus the other fields of a commit.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, threshold int) (*Store, error) {
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("opening the payload store %s: %w", bucket, err)
	}
	if threshold <= 0 {
		threshold = payload.DefaultThreshold
	}
	chunk := uint32(chunkSize)
	if mp := js.Conn().MaxPayload(); mp > 0 && int64(chunk) > mp/2 {
		chunk = uint32(mp / 2)
	}
	return &Store{obs: obs, threshold: threshold, chunk: chunk, cache: map[string][]byte{},
		limit: DefaultCacheBytes, known: map[string]struct{}{}}, nil
}

// Threshold returns the size above which payloads are offloaded.
func (s *Store) Threshold() int { return s.threshold }

// Put implements payload.Putter: it writes data unless the bucket holds it already. data must
// not be changed afterwards (it may be kept in the cache).
func (s *Store) Put(ctx context.Context, data []byte) (payload.Ref, error) {
	r := payload.RefOf(data)
	if s.seen(r.SHA256) {
		return r, nil
	}
	if info, err := s.obs.GetInfo(ctx, r.Name()); err == nil && !info.Deleted && int64(info.Size) == r.Size && digestIs(info.Digest, r) {
		s.remember(r.SHA256, nil)
		return r, nil
	}
	meta := jetstream.ObjectMeta{Name: r.Name(), Description: "Flow payload",
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: s.chunk}}
	if _, err := s.obs.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return payload.Ref{}, fmt.Errorf("writing payload %s: %w", r, err)
	}
	// Kept: the writer (a worker that ran the step) is usually the next to read it.
	s.remember(r.SHA256, data)
	return r, nil
}

// Get implements payload.Getter. The bytes returned may be shared with other callers (the store
// caches small payloads): do not change them. Get returns the payload, read into one buffer of its size and checked against the
// reference (the object store checks the bytes against the object's SHA-256 digest, which must
// be the reference's).
func (s *Store) Get(ctx context.Context, r payload.Ref) ([]byte, error) {
	s.mu.Lock()
	b, ok := s.cache[r.SHA256]
	s.mu.Unlock()
	if ok {
		return b, nil
	}
	res, err := s.obs.Get(ctx, r.Name())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", payload.ErrNotFound, r)
	}
	if err != nil {
		return nil, fmt.Errorf("reading payload %s: %w", r, err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return nil, fmt.Errorf("reading payload %s: %w", r, err)
	}
	if int64(info.Size) != r.Size || !digestIs(info.Digest, r) {
		return nil, fmt.Errorf("payload %s: the stored object has %d bytes with digest %s", r, info.Size, info.Digest)
	}
	b = make([]byte, r.Size)
	if _, err := io.ReadFull(res, b); err != nil {
		return nil, fmt.Errorf("reading payload %s: %w", r, err)
	}
	// The result checks the digest once it reads past the end.
	if n, err := res.Read(make([]byte, 1)); n != 0 || err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading payload %s: %w", r, errors.Join(err, errors.New("more bytes than its size")))
	}
	s.remember(r.SHA256, b)
	return b, nil
}

// Has returns whether the bucket holds the payload r refers to.
func (s *Store) Has(ctx context.Context, r payload.Ref) (bool, error) {
	info, err := s.obs.GetInfo(ctx, r.Name())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !info.Deleted && int64(info.Size) == r.Size, nil
}

func (s *Store) seen(sum string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.known[sum]
	return ok
}

// remember notes that the bucket holds sum, and caches its bytes b when small enough.
func (s *Store) remember(sum string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.known) > 100_000 {
		clear(s.known)
	}
	s.known[sum] = struct{}{}
	if b == nil || len(b) > s.limit/4 {
		return
	}
	if _, ok := s.cache[sum]; ok {
		return
	}
	for s.bytes+len(b) > s.limit && len(s.order) > 0 {
		old := s.order[0]
		s.order = s.order[1:]
		s.bytes -= len(s.cache[old])
		delete(s.cache, old)
	}
	s.cache[sum] = b
	s.order = append(s.order, sum)
	s.bytes += len(b)
}

// digestIs reports whether an object store digest ("SHA-256=<base64url>") is r's hash.
func digestIs(digest string, r payload.Ref) bool {
	raw, err := jetstream.DecodeObjectDigest(digest)
	if err != nil {
		return false
	}
	want, err := hex.DecodeString(r.SHA256)
	return err == nil && bytes.Equal(raw, want)
}
