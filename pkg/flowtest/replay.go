package flowtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// Replay verifies that the workflows of reg replay the history stored in the file at path (as
// written by WriteHistory or `flow history --json`): at every point where the history recorded a
// decision, the code must make the same decision, field by field. It fails t with the
// non-determinism error otherwise. Keep histories of runs of each released version in testdata/
// and replay them in CI, so that a change that would break open runs fails before it deploys.
// The run's build ID is not compared: the point is to try new code on old histories.
func Replay(t testing.TB, path string, reg *flow.Registry) {
	t.Helper()
	if err := ReplayFile(path, reg); err != nil {
		t.Fatalf("flowtest.Replay(%s): %v", path, err)
	}
}

// ReplayFile is Replay returning the error instead of failing a test.
func ReplayFile(path string, reg *flow.Registry) error {
	hist, err := ReadHistory(path)
	if err != nil {
		return err
	}
	return ReplayHistory(hist, reg)
}

// ReplayHistory verifies that reg replays hist; see Replay.
func ReplayHistory(hist []event.Envelope, reg *flow.Registry) error {
	if len(hist) == 0 {
		return fmt.Errorf("%w: empty history", flow.ErrInvalidHistory)
	}
	_, err := core.Replay(hist[0].RunID, hist, sdk.RuntimeOf(reg).Replaying(), core.DecideOptions{IgnoreBuildID: true})
	return err
}

// ReadHistory reads a history: a JSON array of envelopes, or one envelope per line.
func ReadHistory(path string) ([]event.Envelope, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '[' {
		var hist []event.Envelope
		if err := json.Unmarshal(t, &hist); err != nil {
			return nil, fmt.Errorf("reading history %s: %w", path, err)
		}
		return hist, nil
	}
	var hist []event.Envelope
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 64*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		e, err := event.Decode(line)
		if err != nil {
			return nil, fmt.Errorf("reading history %s line %d: %w", path, n, err)
		}
		hist = append(hist, e)
	}
	return hist, sc.Err()
}

// WriteHistory writes hist to path, one envelope per line.
func WriteHistory(path string, hist []event.Envelope) error {
	var b bytes.Buffer
	for _, e := range hist {
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
