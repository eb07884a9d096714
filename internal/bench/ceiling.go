package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
)

// The JetStream ceiling: raw appends with the expected-last-subject-sequence check that Flow's
// commits carry, on a stream of its own.
const (
	ceilingStream  = "FLOWBENCH_CEILING"
	ceilingPrefix  = "flowbench.ceiling."
	ceilingMsgSize = 400 // about one Flow commit
	// ceilingSubjects is the number of subjects (runs) of ceiling-1000.
	ceilingSubjects = 1000
)

// ceilingStreamFor creates the test stream with the history's storage and replicas (and, with
// atomic, atomic batch publishes allowed), and returns a func that deletes it. On a partitioned
// history (Options.Partitions) it creates as many streams, FLOWBENCH_CEILING_<p> on
// flowbench.ceiling.<p>.>, each with its own leader, as the history streams are: the subjects
// of ceilingSubject spread over them.
func (r *rep) ceilingStreamFor(atomic bool) (func() error, error) {
	layout, err := streams.Load(r.ctx, r.st.js)
	if err != nil {
		return nil, err
	}
	hist, err := r.st.js.Stream(r.ctx, layout.Stream(0))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", layout.Stream(0), err)
	}
	hc := hist.CachedInfo().Config
	r.ceilingParts = layout.Partitions()
	var names []string
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var errs []error
		for _, name := range names {
			errs = append(errs, r.st.js.DeleteStream(ctx, name))
		}
		return errors.Join(errs...)
	}
	for p := range r.ceilingParts {
		name, subjects := ceilingStream, ceilingPrefix+">"
		if r.ceilingParts > 1 {
			name, subjects = fmt.Sprintf("%s_%d", ceilingStream, p), fmt.Sprintf("%s%d.>", ceilingPrefix, p)
		}
		if _, err := r.st.js.CreateStream(r.ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{subjects},
			Storage: hc.Storage, Replicas: hc.Replicas, Retention: jetstream.LimitsPolicy, AllowAtomicPublish: atomic,
		}); err != nil {
			return nil, errors.Join(fmt.Errorf("creating %s: %w", name, err), drop())
		}
		names = append(names, name)
	}
	return drop, nil
}

// wrongLast reports an append refused for its expected last subject sequence.
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// lastCeilingSeq returns the stream sequence of subject's last message, read from its ceiling
// stream's leader.
func (r *rep) lastCeilingSeq(subject string) (uint64, error) {
	name := ceilingStream
	if r.ceilingParts > 1 {
		p, _, _ := strings.Cut(strings.TrimPrefix(subject, ceilingPrefix), ".")
		name = ceilingStream + "_" + p
	}
	st, err := r.st.js.Stream(r.ctx, name)
	if err != nil {
		return 0, err
	}
	m, err := st.GetLastMsgForSubject(r.ctx, subject) // the stream allows no direct gets: its leader answers
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// ceilingSubject returns the subject of the ceiling's subject number i (a run's): on a
// partitioned history, in ceiling stream i mod the partitions.
func (r *rep) ceilingSubject(i int) string {
	if r.ceilingParts > 1 {
		return fmt.Sprintf("%s%d.%d", ceilingPrefix, i%r.ceilingParts, i)
	}
	return ceilingPrefix + strconv.Itoa(i)
}

// appendLoop appends to subjects in turn, each message expecting the subject's previous one,
// until deadline; it returns how many it appended.
func (r *rep) appendLoop(subjects []string, deadline time.Time) (int, error) {
	payload := []byte(strings.Repeat("x", ceilingMsgSize))
	last := make([]uint64, len(subjects))
	n := 0
	for i := 0; time.Now().Before(deadline); i = (i + 1) % len(subjects) {
		ack, err := r.st.js.PublishMsg(r.ctx, &nats.Msg{Subject: subjects[i], Data: payload},
			jetstream.WithExpectLastSequencePerSubject(last[i]))
		if wrongLast(err) {
			// nats.go published the append again after no answer (a leader was being
			// elected), and the stream refused the copy behind the first: go on from the
			// subject's last message, as Flow's store settles such an append.
			if last[i], err = r.lastCeilingSeq(subjects[i]); err == nil {
				continue
			}
		}
		if err != nil {
			return n, fmt.Errorf("appending to %s after sequence %d: %w", subjects[i], last[i], err)
		}
		last[i] = ack.Sequence
		n++
	}
	return n, nil
}

// ceiling appends for r.n milliseconds to nSubjects subjects from goroutines goroutines (each
// owning every goroutines-th subject) and returns appends_per_s.
func (r *rep) ceiling(nSubjects, goroutines int) (_ map[string]float64, err error) {
	drop, err := r.ceilingStreamFor(false)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, drop()) }()
	owned := make([][]string, goroutines)
	for s := range nSubjects {
		owned[s%goroutines] = append(owned[s%goroutines], r.ceilingSubject(s))
	}
	var total atomic.Int64
	r.begin()
	t0 := time.Now()
	deadline := t0.Add(time.Duration(r.n) * time.Millisecond)
	err = parallel(r.ctx, goroutines, func(g int) error {
		n, err := r.appendLoop(owned[g], deadline)
		total.Add(int64(n))
		return err
	})
	secs := time.Since(t0).Seconds()
	r.end()
	if err != nil {
		return nil, err
	}
	return map[string]float64{"appends_per_s": float64(total.Load()) / secs}, nil
}

// runCeiling1: one subject, appended to sequentially.
func runCeiling1(r *rep) (map[string]float64, error) { return r.ceiling(1, 1) }

// runCeiling1000: 1,000 subjects from 64 goroutines.
func runCeiling1000(r *rep) (map[string]float64, error) {
	return r.ceiling(ceilingSubjects, clients)
}
