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

// ceilingStreamFor creates the test stream with FLOW_HISTORY's storage and replicas (and, with
// atomic, atomic batch publishes allowed), and returns a func that deletes it.
func (r *rep) ceilingStreamFor(atomic bool) (func() error, error) {
	hist, err := r.st.js.Stream(r.ctx, streams.History)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", streams.History, err)
	}
	hc := hist.CachedInfo().Config
	if _, err := r.st.js.CreateStream(r.ctx, jetstream.StreamConfig{
		Name: ceilingStream, Subjects: []string{ceilingPrefix + ">"},
		Storage: hc.Storage, Replicas: hc.Replicas, Retention: jetstream.LimitsPolicy, AllowAtomicPublish: atomic,
	}); err != nil {
		return nil, fmt.Errorf("creating %s: %w", ceilingStream, err)
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return r.st.js.DeleteStream(ctx, ceilingStream)
	}, nil
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
		owned[s%goroutines] = append(owned[s%goroutines], ceilingPrefix+strconv.Itoa(s))
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
