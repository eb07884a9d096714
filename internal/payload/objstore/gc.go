package objstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/fault"
)

// The collector's side of the store (the history service's payload collector,
// docs/large-payloads.md#collecting-payloads). A deletion is three writes:
//
//  1. the object's deletion record, a metadata message marked deleted, published only if the
//     object's last metadata message is still the one the collector judged (the expected last
//     subject sequence): a touch or a new write of the object since makes it fail, and the
//     object is kept. This is the deletion's commit point; from here a Get finds no object;
//  2. the purge of the chunks of the version deleted (their subject is that version's own: a
//     new write of the object puts its chunks under a new one);
//  3. the purge of the deletion record itself, and of the object's metadata messages before
//     it, bounded by its stream sequence, so that a newer metadata message (the object written
//     again) stays.
//
// None of them uses the Nats-Rollup header, which OBJ_FLOW_PAYLOADS refuses (internal/backend/streams).
//
// A collector that stops after 1 or 2 leaves a deletion record, which Objects lists and
// FinishDelete completes.

// Object is one object of the payload store, as its last metadata message says.
type Object struct {
	// Name is the object's name: the hex SHA-256 of its bytes.
	Name string
	// Size is the object's size in bytes (0 for a deleted one).
	Size uint64
	// ModTime is when the object was last written or touched (the server's time).
	ModTime time.Time
	// Deleted marks the record of a deletion not finished yet (FinishDelete).
	Deleted bool
}

// Objects lists every object of the store, with the records of deletions left unfinished.
func (s *Store) Objects(ctx context.Context) ([]Object, error) {
	infos, err := s.obs.List(ctx, jetstream.ListObjectsShowDeleted())
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the objects of %s: %w", s.bucket, err)
	}
	out := make([]Object, 0, len(infos))
	for _, info := range infos {
		out = append(out, Object{Name: info.Name, Size: info.Size, ModTime: info.ModTime, Deleted: info.Deleted})
	}
	return out, nil
}

// DeleteUnchanged deletes object name if it was last written or touched before cutoff, as a
// fresh read of its metadata shows, and if nothing writes or touches it between that read and
// the deletion's commit point. It returns the size deleted and whether it deleted the object;
// false with no error when the object is gone, newer than cutoff, or was written or touched
// meanwhile. Fault point fault.PayloadGCBeforeDelete lies between the read and the deletion.
func (s *Store) DeleteUnchanged(ctx context.Context, name string, cutoff time.Time) (uint64, bool, error) {
	m, info, err := s.meta(ctx, name)
	if err != nil {
		return 0, false, fmt.Errorf("reading object %s of %s: %w", name, s.bucket, err)
	}
	if info == nil || info.Deleted || !info.ModTime.Before(cutoff) {
		return 0, false, nil
	}
	if err := s.faults.Hit(fault.PayloadGCBeforeDelete); err != nil {
		return 0, false, err
	}
	dead := *info
	dead.Deleted = true
	dead.Size, dead.Chunks, dead.Digest, dead.ModTime = 0, 0, "", time.Time{}
	data, err := json.Marshal(&dead)
	if err != nil {
		return 0, false, err
	}
	msg := nats.NewMsg(m.Subject)
	msg.Data = data
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(m.Sequence))
	if wrongLastSequence(err) {
		return 0, false, nil // written or touched since the read: kept
	}
	if err != nil {
		return 0, false, fmt.Errorf("deleting object %s of %s: %w", name, s.bucket, err)
	}
	s.forget(name)
	return info.Size, true, s.finish(ctx, m.Subject, info.NUID, ack.Sequence)
}

// FinishDelete completes the deletion of object name, if its last metadata message is the
// record of a deletion: it purges the chunks and the record. It reports whether it found one.
func (s *Store) FinishDelete(ctx context.Context, name string) (bool, error) {
	m, info, err := s.meta(ctx, name)
	if err != nil {
		return false, fmt.Errorf("reading object %s of %s: %w", name, s.bucket, err)
	}
	if info == nil || !info.Deleted {
		return false, nil
	}
	return true, s.finish(ctx, m.Subject, info.NUID, m.Sequence)
}

// finish purges the chunks stored under nuid and the deletion record at stream sequence seq on
// subject metaSubject, with the metadata messages before it, leaving any later one.
func (s *Store) finish(ctx context.Context, metaSubject, nuid string, seq uint64) error {
	if nuid != "" {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(s.chunkSubject(nuid))); err != nil {
			return fmt.Errorf("purging the chunks of a deleted object of %s: %w", s.bucket, err)
		}
	}
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(metaSubject), jetstream.WithPurgeSequence(seq+1)); err != nil {
		return fmt.Errorf("purging the deletion record of an object of %s: %w", s.bucket, err)
	}
	return nil
}

// forget drops payload name from the cache.
func (s *Store) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.cache[name]; ok {
		s.bytes -= len(b)
		delete(s.cache, name)
		for i, n := range s.order {
			if n == name {
				s.order = append(s.order[:i], s.order[i+1:]...)
				break
			}
		}
	}
}

// SweepChunks purges what writers leave behind, since they never purge (Put): the chunks no
// object's metadata names (not even a deletion record's) whose last message was written before
// cutoff, those of an upload that failed part way, or that lost its race to another writer of
// the same object; and every object's metadata messages before its last, which touches and new
// writes superseded (trimmed whatever their age: every reader reads the last one). An upload in
// progress has written its chunks after cutoff, which lies the collector's grace period back.
// It returns how many chunk subjects it purged.
func (s *Store) SweepChunks(ctx context.Context, cutoff time.Time) (int, error) {
	n, err := s.sweepChunks(ctx, cutoff)
	if err != nil {
		return n, err
	}
	return n, s.trimMeta(ctx)
}

// trimMeta purges the metadata messages of each object but its last. A purge keeping a subject's
// last message leaves a conditional write that expects that message (a touch, the collector's
// deletion) free to succeed, and one racing it, on a message it keeps or on a later one.
func (s *Store) trimMeta(ctx context.Context) error {
	si, err := s.stream.Info(ctx, jetstream.WithSubjectFilter("$O."+s.bucket+".M.>"))
	if err != nil {
		return fmt.Errorf("listing the metadata of %s: %w", s.bucket, err)
	}
	for subject, msgs := range si.State.Subjects {
		if msgs < 2 {
			continue
		}
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeKeep(1)); err != nil {
			return fmt.Errorf("purging the superseded metadata %s of %s: %w", subject, s.bucket, err)
		}
	}
	return nil
}

func (s *Store) sweepChunks(ctx context.Context, cutoff time.Time) (int, error) {
	infos, err := s.obs.List(ctx, jetstream.ListObjectsShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, fmt.Errorf("listing the objects of %s: %w", s.bucket, err)
	}
	named := make(map[string]bool, len(infos))
	for _, info := range infos {
		named[s.chunkSubject(info.NUID)] = true
	}
	si, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.chunkSubject(">")))
	if err != nil {
		return 0, fmt.Errorf("listing the chunks of %s: %w", s.bucket, err)
	}
	n := 0
	for subject := range si.State.Subjects {
		if named[subject] {
			continue
		}
		m, err := s.stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("reading the chunks %s of %s: %w", subject, s.bucket, err)
		}
		if !m.Time.Before(cutoff) {
			continue
		}
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			return n, fmt.Errorf("purging the orphaned chunks %s of %s: %w", subject, s.bucket, err)
		}
		n++
	}
	return n, nil
}
