// Package objstore is the content-addressed payload store on a JetStream Object Store bucket.
package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/fault"
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
//
// The history service's payload collector deletes the objects no retained history refers to
// once they are older than its grace period (gc.go). Against it, every Put writes: a new
// object, or, for one that is there already, a touch (its metadata written again, which makes
// it new to the collector). Touches and the collector's deletions are each conditional on the
// object's metadata being what their writer read, so of a touch and a deletion that race, one
// fails: a writer whose touch fails reads the object again and stores it anew if it was
// deleted, so that a Put that returns leaves the object there.
//
// Put never purges (the workers' and the ingress's NATS users may not, internal/natsperm), nor
// rolls up (the stream allows no Nats-Rollup header, internal/backend/streams): it writes an object's
// chunks under a subject of their own and then its metadata, conditional on the metadata it
// read, so that of two writers of one name that race, one wins and the other finds the object
// there. The chunks of the loser, and of an upload that failed part way, are orphans no
// metadata names, and a name's metadata messages before its last are superseded: the history
// service's payload collector purges both (SweepChunks). Unlike nats.go's ObjectStore.Put, which
// purges the chunks of the object it overwrites, and of its own upload when it fails, and rolls
// up the name's earlier metadata messages.
type Store struct {
	obs       jetstream.ObjectStore
	js        jetstream.JetStream
	stream    jetstream.Stream // OBJ_<bucket>
	bucket    string
	threshold int
	chunk     uint32
	faults    *fault.Injector

	mu    sync.Mutex
	cache map[string][]byte
	order []string
	bytes int
	limit int
}

// Open returns the store on bucket, which must exist (streams.Ensure creates it). threshold is
// the size above which payloads are offloaded (<= 0: payload.DefaultThreshold); it must be below the
// server's max_payload minus the other fields of a commit.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, threshold int) (*Store, error) {
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("opening the payload store %s: %w", bucket, err)
	}
	stream, err := js.Stream(ctx, "OBJ_"+bucket)
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
	return &Store{obs: obs, js: js, stream: stream, bucket: bucket, threshold: threshold, chunk: chunk,
		cache: map[string][]byte{}, limit: DefaultCacheBytes}, nil
}

// SetCacheBytes bounds the payloads the store keeps in memory after reading or writing them
// (DefaultCacheBytes unless set); 0 keeps none. Call it before using the store.
func (s *Store) SetCacheBytes(n int) { s.limit = max(n, 0) }

// SetFaults arms the store's fault points (fault.PayloadBeforeTouch, fault.PayloadGCBeforeDelete),
// for tests. Call it before using the store.
func (s *Store) SetFaults(f *fault.Injector) { s.faults = f }

// Threshold returns the size above which payloads are offloaded.
func (s *Store) Threshold() int { return s.threshold }

// touchTries bounds the touches and conditional writes Put tries on an object whose metadata
// keeps changing under it (other writers touching or storing it) before it stores the object
// anew, unconditionally.
const touchTries = 3

// Put implements payload.Putter: it stores data, or touches the object when the bucket holds it
// already. Either way the object is there when Put returns, and new to the collector (its
// modification time is now). data must not be changed afterwards (it may be kept in the cache).
func (s *Store) Put(ctx context.Context, data []byte) (payload.Ref, error) {
	r := payload.RefOf(data)
	for range touchTries {
		m, info, err := s.meta(ctx, r.Name())
		if err != nil {
			return payload.Ref{}, fmt.Errorf("writing payload %s: %w", r, err)
		}
		if info == nil || info.Deleted || int64(info.Size) != r.Size || !digestIs(info.Digest, r) {
			// Absent, deleted, or not these bytes: store it, unless another writer did since.
			stored, err := s.putNew(ctx, r, data, m)
			if err != nil {
				return payload.Ref{}, fmt.Errorf("writing payload %s: %w", r, err)
			}
			if stored {
				s.remember(r.SHA256, data)
				return r, nil
			}
			continue
		}
		if err := s.faults.Hit(fault.PayloadBeforeTouch); err != nil {
			return payload.Ref{}, fmt.Errorf("writing payload %s: %w", r, err)
		}
		err = s.touch(ctx, m)
		if err == nil {
			return r, nil
		}
		if !wrongLastSequence(err) {
			return payload.Ref{}, fmt.Errorf("touching payload %s: %w", r, err)
		}
		// Deleted or touched since the read: read it again.
	}
	if err := s.store(ctx, r, data, nil); err != nil {
		return payload.Ref{}, fmt.Errorf("writing payload %s: %w", r, err)
	}
	// Kept: the writer (a worker that ran the step) is usually the next to read it.
	s.remember(r.SHA256, data)
	return r, nil
}

// putNew stores data as object r.Name() if its last metadata message is still m (nil: none),
// as read by Put, which found the object absent, deleted or holding other bytes. It reports
// false, and no error, when another message replaced m meanwhile (another writer stored or
// touched it, the collector deleted it): Put then reads the object again.
func (s *Store) putNew(ctx context.Context, r payload.Ref, data []byte, m *jetstream.RawStreamMsg) (bool, error) {
	var last uint64
	if m != nil {
		last = m.Sequence
	}
	err := s.store(ctx, r, data, &last)
	if wrongLastSequence(err) {
		return false, nil
	}
	return err == nil, err
}

// store writes data as object r.Name() as nats.go's object store lays objects out, so that its
// readers read it: the chunks on a subject named by a new NUID, then the metadata, conditional
// on the name's last metadata message being at stream sequence *last (0: none) unless last is
// nil. It purges nothing: chunks it wrote before a failure, or before a refused metadata write,
// are left to SweepChunks, and so are the name's earlier metadata messages. (nats.go's Put rolls
// them up with the Nats-Rollup header, which OBJ_FLOW_PAYLOADS refuses, internal/backend/streams: every
// reader, nats.go's included, reads the last metadata message of a name.)
func (s *Store) store(ctx context.Context, r payload.Ref, data []byte, last *uint64) error {
	id := nuid.Next()
	h := sha256.New()
	var chunks uint32
	for rest := data; len(rest) > 0; chunks++ {
		n := min(len(rest), int(s.chunk))
		msg := nats.NewMsg(s.chunkSubject(id))
		msg.Data = rest[:n]
		h.Write(msg.Data)
		if _, err := s.js.PublishMsg(ctx, msg); err != nil {
			return err
		}
		rest = rest[n:]
	}
	info := jetstream.ObjectInfo{Bucket: s.bucket, NUID: id, Size: uint64(len(data)), Chunks: chunks,
		Digest: jetstream.GetObjectDigestValue(h),
		ObjectMeta: jetstream.ObjectMeta{Name: r.Name(), Description: "Flow payload",
			Opts: &jetstream.ObjectMetaOptions{ChunkSize: s.chunk}}}
	b, err := json.Marshal(&info)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(s.metaSubject(r.Name()))
	msg.Data = b
	var opts []jetstream.PublishOpt
	if last != nil {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(*last))
	}
	_, err = s.js.PublishMsg(ctx, msg, opts...)
	return err
}

// metaSubject is the subject of object name's metadata, as nats.go's object store names it.
func (s *Store) metaSubject(name string) string {
	return "$O." + s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// chunkSubject is the subject of the chunks of the object stored under nuid.
func (s *Store) chunkSubject(nuid string) string { return "$O." + s.bucket + ".C." + nuid }

// meta returns the last metadata message of object name and what it says, or nils when the
// bucket never held it (or the collector removed its deletion record). The message may be a
// replica's, behind the stream leader: a write conditional on its sequence then fails.
func (s *Store) meta(ctx context.Context, name string) (*jetstream.RawStreamMsg, *jetstream.ObjectInfo, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, s.metaSubject(name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return nil, nil, fmt.Errorf("the metadata of object %s in %s does not decode: %w", name, s.bucket, err)
	}
	info.ModTime = m.Time
	return m, &info, nil
}

// touch writes the metadata message m again, as the object's new metadata, unless another
// message replaced m meanwhile (an error wrongLastSequence reports): the object's modification
// time becomes now. m stays in the stream until SweepChunks purges it.
func (s *Store) touch(ctx context.Context, m *jetstream.RawStreamMsg) error {
	msg := nats.NewMsg(m.Subject)
	msg.Data = m.Data
	_, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(m.Sequence))
	return err
}

// wrongLastSequence reports a conditional write refused because the subject's last message is
// not the one expected (code 10071, or 10164 on replicated streams).
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == 10071 || apiErr.ErrorCode == 10164)
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

// remember caches the bytes b of payload sum when they are small enough.
func (s *Store) remember(sum string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
