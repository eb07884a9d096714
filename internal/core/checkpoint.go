package core

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// A checkpoint is a snapshot encoded so that it decodes to a snapshot equal to it in every
// field, unexported ones included (the batches, the unsettled list, the vetted flags, the
// positions, the signal buffers...): a snapshot decoded from a checkpoint at sequence n, fed the
// events after n, is the snapshot replayed from the start (TestPropertyCheckpoint). It is
// derived and never a second truth: a cold load that finds a checkpoint it cannot use (another
// layout, damaged, or not matching the history) reads the whole history instead.
//
// The encoding is a compact binary walk of the Snapshot type, compiled once by reflection:
// integers as varints, strings and byte slices with their length (nil apart from empty), maps
// and slices with their length (nil apart from empty), pointers with a presence byte, times in
// their binary form. Unexported fields are read and set through their addresses. The pointer
// structure the projection relies on (a batch's members and the unsettled list are the steps of
// Snapshot.Steps, the same pointers) is written as step and child IDs and linked again on
// decoding. The header holds a fingerprint of the type's layout: a checkpoint written by a
// build whose Snapshot has other fields is refused (ErrCheckpointLayout), not misread.

// checkpointMagic begins every encoded checkpoint, with the format version.
var checkpointMagic = []byte("FLOWCP1\n")

// ErrCheckpointLayout is returned by UnmarshalCheckpoint for a checkpoint encoded by a build
// whose Snapshot type differs from this one's.
var ErrCheckpointLayout = errors.New("flow: checkpoint written with another snapshot layout")

// ErrCheckpointCorrupt is returned by UnmarshalCheckpoint for bytes that do not decode.
var ErrCheckpointCorrupt = errors.New("flow: checkpoint does not decode")

// MarshalCheckpoint encodes the snapshot, every field of it. It must not run concurrently with
// Apply on s, nor during Replay's look-ahead.
func (s *Snapshot) MarshalCheckpoint() ([]byte, error) {
	c := snapshotCodec()
	if s.ahead != nil {
		return nil, errors.New("core: a snapshot cannot be checkpointed while a replay looks ahead")
	}
	w := &cpWriter{b: make([]byte, 0, 1024+160*len(s.Steps)+96*len(s.Signals))}
	w.b = append(w.b, checkpointMagic...)
	w.b = append(w.b, c.fingerprint[:]...)
	if err := c.enc(w, reflect.ValueOf(s).Elem()); err != nil {
		return nil, err
	}
	// The shared pointers, as IDs.
	writeBatches(w, s.stepBatches, func(st *Step) string { return st.ID })
	writeBatches(w, s.childBatches, func(ch *Child) string { return ch.ID })
	n := 0
	for st := s.unsettled.first; st != nil; st = st.next {
		n++
	}
	w.uvarint(uint64(n))
	for st := s.unsettled.first; st != nil; st = st.next {
		w.str(st.ID)
	}
	return w.b, nil
}

// UnmarshalCheckpoint decodes a checkpoint MarshalCheckpoint encoded. It returns an error
// wrapping ErrCheckpointLayout or ErrCheckpointCorrupt when it cannot.
func UnmarshalCheckpoint(b []byte) (*Snapshot, error) {
	c := snapshotCodec()
	if len(b) < len(checkpointMagic)+len(c.fingerprint) || string(b[:len(checkpointMagic)]) != string(checkpointMagic) {
		return nil, fmt.Errorf("%w: no checkpoint header", ErrCheckpointCorrupt)
	}
	b = b[len(checkpointMagic):]
	if string(b[:len(c.fingerprint)]) != string(c.fingerprint[:]) {
		return nil, ErrCheckpointLayout
	}
	r := &cpReader{b: b[len(c.fingerprint):]}
	s := &Snapshot{}
	c.dec(r, reflect.ValueOf(s).Elem())
	s.stepBatches = readBatches(r, s.Steps, "a batch names a step the snapshot does not hold")
	s.childBatches = readBatches(r, s.Children, "a batch names a child the snapshot does not hold")
	for n := r.length(); n > 0 && r.err == nil; n-- {
		st, ok := s.Steps[r.str()]
		if !ok || st.prev != nil || st.next != nil || s.unsettled.last == st {
			r.fail("the unsettled list names a step the snapshot does not hold, or twice")
			break
		}
		s.unsettled.push(st)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// writeBatches encodes a batch map (batch seq to its members, which the snapshot also holds by
// ID) as the members' IDs, batches in seq order, members in slice order.
func writeBatches[T any](w *cpWriter, batches map[uint64][]*T, id func(*T) string) {
	w.uvarint(uint64(len(batches)))
	for _, seq := range sortedKeys(batches) {
		w.uvarint(seq)
		members := batches[seq]
		w.uvarint(uint64(len(members)))
		for _, m := range members {
			w.str(id(m))
		}
	}
}

// readBatches decodes what writeBatches encoded, resolving each ID in byID so the batch shares
// the snapshot's pointers; an ID byID does not hold fails r with missing. It returns nil once r
// has failed.
func readBatches[T any](r *cpReader, byID map[string]*T, missing string) map[uint64][]*T {
	nb := r.length()
	var batches map[uint64][]*T
	if r.err == nil {
		batches = make(map[uint64][]*T, nb)
	}
	for range nb {
		seq, n := r.uvarint(), r.length()
		members := make([]*T, 0, n)
		for range n {
			m, ok := byID[r.str()]
			if !ok {
				r.fail(missing)
				break
			}
			members = append(members, m)
		}
		batches[seq] = members
	}
	return batches
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// cpSkipped are the fields the reflective walk leaves out: the pointer structure, written as
// IDs by MarshalCheckpoint, and Replay's look-ahead, which is nil outside Replay.
var cpSkipped = map[string]bool{
	"core.Snapshot.stepBatches": true, "core.Snapshot.childBatches": true, "core.Snapshot.unsettled": true,
	"core.Snapshot.ahead": true, "core.Step.prev": true, "core.Step.next": true,
}

type codec struct {
	enc func(*cpWriter, reflect.Value) error
	dec func(*cpReader, reflect.Value)
}

type compiledSnapshot struct {
	codec
	fingerprint [8]byte
}

var (
	snapshotOnce  sync.Once
	snapshotCodeC compiledSnapshot
)

func snapshotCodec() *compiledSnapshot {
	snapshotOnce.Do(func() {
		var layout strings.Builder
		comp := &compiler{done: map[reflect.Type]*codec{}, layout: &layout}
		snapshotCodeC.codec = *comp.compile(reflect.TypeFor[Snapshot]())
		sum := sha256.Sum256([]byte(layout.String()))
		copy(snapshotCodeC.fingerprint[:], sum[:])
	})
	return &snapshotCodeC
}

// compiler builds the codec of a type once, and writes its layout for the fingerprint.
type compiler struct {
	done   map[reflect.Type]*codec
	layout *strings.Builder
}

var timeType = reflect.TypeFor[time.Time]()

func (cm *compiler) compile(t reflect.Type) *codec {
	if c, ok := cm.done[t]; ok {
		return c // a recursive type: filled in below before it is used
	}
	c := &codec{}
	cm.done[t] = c
	fmt.Fprintf(cm.layout, "%s(%s)", t.String(), t.Kind())
	switch {
	case t == timeType:
		c.enc = func(w *cpWriter, v reflect.Value) error {
			b, err := (*time.Time)(unsafe.Pointer(v.UnsafeAddr())).MarshalBinary()
			if err != nil {
				return err
			}
			w.bytes(b)
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) {
			b := r.bytes()
			if r.err == nil {
				if err := (*time.Time)(unsafe.Pointer(v.UnsafeAddr())).UnmarshalBinary(b); err != nil {
					r.fail(err.Error())
				}
			}
		}
		return c
	}
	switch t.Kind() {
	case reflect.Bool:
		c.enc = func(w *cpWriter, v reflect.Value) error {
			w.b = append(w.b, b2u(v.Bool()))
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) { v.SetBool(r.byte() == 1) }
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		c.enc = func(w *cpWriter, v reflect.Value) error {
			w.b = binary.AppendVarint(w.b, v.Int())
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) { v.SetInt(r.varint()) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		c.enc = func(w *cpWriter, v reflect.Value) error {
			w.uvarint(v.Uint())
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) { v.SetUint(r.uvarint()) }
	case reflect.Float32, reflect.Float64:
		c.enc = func(w *cpWriter, v reflect.Value) error {
			w.uvarint(math.Float64bits(v.Float()))
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) { v.SetFloat(math.Float64frombits(r.uvarint())) }
	case reflect.String:
		c.enc = func(w *cpWriter, v reflect.Value) error {
			w.str(v.String())
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) { v.SetString(r.str()) }
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			c.enc = func(w *cpWriter, v reflect.Value) error {
				if v.IsNil() {
					w.uvarint(0)
					return nil
				}
				w.uvarint(uint64(v.Len()) + 1)
				w.b = append(w.b, v.Bytes()...)
				return nil
			}
			c.dec = func(r *cpReader, v reflect.Value) {
				if n, ok := r.nilOrLen(); ok {
					v.SetBytes(r.take(n))
				}
			}
			break
		}
		elem := cm.compile(t.Elem())
		c.enc = func(w *cpWriter, v reflect.Value) error {
			if v.IsNil() {
				w.uvarint(0)
				return nil
			}
			w.uvarint(uint64(v.Len()) + 1)
			for i := range v.Len() {
				if err := elem.enc(w, v.Index(i)); err != nil {
					return err
				}
			}
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) {
			n, ok := r.nilOrLen()
			if !ok {
				return
			}
			s := reflect.MakeSlice(t, n, n)
			for i := 0; i < n && r.err == nil; i++ {
				elem.dec(r, s.Index(i))
			}
			v.Set(s)
		}
	case reflect.Map:
		key, elem := cm.compile(t.Key()), cm.compile(t.Elem())
		c.enc = func(w *cpWriter, v reflect.Value) error {
			if v.IsNil() {
				w.uvarint(0)
				return nil
			}
			w.uvarint(uint64(v.Len()) + 1)
			it := v.MapRange()
			k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			for it.Next() {
				k.SetIterKey(it)
				e.SetIterValue(it)
				if err := key.enc(w, k); err != nil {
					return err
				}
				if err := elem.enc(w, e); err != nil {
					return err
				}
			}
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) {
			n, ok := r.nilOrLen()
			if !ok {
				return
			}
			m := reflect.MakeMapWithSize(t, n)
			k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			for i := 0; i < n && r.err == nil; i++ {
				k.SetZero()
				e.SetZero()
				key.dec(r, k)
				elem.dec(r, e)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Pointer:
		elem := cm.compile(t.Elem())
		c.enc = func(w *cpWriter, v reflect.Value) error {
			if v.IsNil() {
				w.b = append(w.b, 0)
				return nil
			}
			w.b = append(w.b, 1)
			return elem.enc(w, v.Elem())
		}
		c.dec = func(r *cpReader, v reflect.Value) {
			if r.byte() != 1 {
				return
			}
			p := reflect.New(t.Elem())
			elem.dec(r, p.Elem())
			v.Set(p)
		}
	case reflect.Struct:
		type field struct {
			i int
			c *codec
		}
		var fields []field
		for i := range t.NumField() {
			f := t.Field(i)
			if cpSkipped[t.String()+"."+f.Name] {
				continue
			}
			fmt.Fprintf(cm.layout, "{%s:", f.Name)
			fields = append(fields, field{i, cm.compile(f.Type)})
			cm.layout.WriteString("}")
		}
		c.enc = func(w *cpWriter, v reflect.Value) error {
			for _, f := range fields {
				if err := f.c.enc(w, settable(v.Field(f.i))); err != nil {
					return err
				}
			}
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) {
			for _, f := range fields {
				if r.err != nil {
					return
				}
				f.c.dec(r, settable(v.Field(f.i)))
			}
		}
	case reflect.Interface:
		// Only nil interfaces are checkpointed (Replay's look-ahead is skipped).
		c.enc = func(w *cpWriter, v reflect.Value) error {
			if !v.IsNil() {
				return fmt.Errorf("core: cannot checkpoint a %s holding %s", t, v.Elem().Type())
			}
			w.b = append(w.b, 0)
			return nil
		}
		c.dec = func(r *cpReader, v reflect.Value) {
			if r.byte() != 0 {
				r.fail("a non-nil interface")
			}
		}
	default:
		panic(fmt.Sprintf("core: checkpoints cannot encode %s (%s)", t, t.Kind()))
	}
	return c
}

// settable returns v, a field of an addressable struct, as a value that may be read and set
// even when the field is unexported.
func settable(v reflect.Value) reflect.Value {
	if v.CanSet() {
		return v
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

type cpWriter struct{ b []byte }

func (w *cpWriter) uvarint(x uint64) { w.b = binary.AppendUvarint(w.b, x) }
func (w *cpWriter) str(s string) {
	w.uvarint(uint64(len(s)))
	w.b = append(w.b, s...)
}
func (w *cpWriter) bytes(b []byte) {
	w.uvarint(uint64(len(b)))
	w.b = append(w.b, b...)
}

type cpReader struct {
	b   []byte
	err error
}

func (r *cpReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrCheckpointCorrupt, what)
	}
	r.b = nil
}

func (r *cpReader) byte() byte {
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *cpReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *cpReader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint reads one varint with decode (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](r *cpReader, decode func([]byte) (T, int)) T {
	x, n := decode(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return x
}

// length reads a count, bounded by the bytes left (every element takes at least one).
func (r *cpReader) length() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("a length beyond the end")
		return 0
	}
	return int(n)
}

// nilOrLen reads a length written as n+1, 0 for nil.
func (r *cpReader) nilOrLen() (int, bool) {
	n := r.uvarint()
	if n == 0 || r.err != nil {
		return 0, false
	}
	if n-1 > uint64(len(r.b)) {
		r.fail("a length beyond the end")
		return 0, false
	}
	return int(n - 1), true
}

func (r *cpReader) take(n int) []byte {
	if n > len(r.b) {
		r.fail("truncated")
		return nil
	}
	b := make([]byte, n)
	copy(b, r.b)
	r.b = r.b[n:]
	return b
}

func (r *cpReader) str() string {
	n := r.length()
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *cpReader) bytes() []byte { return r.take(r.length()) }
