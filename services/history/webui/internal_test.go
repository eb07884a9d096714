package webui

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
)

func TestDiagnose(t *testing.T) {
	t.Parallel()
	blocked := func(err error) *core.Blocked {
		f := core.DecisionFailure(err, "b1")
		return &core.Blocked{Kind: f.Kind, Code: f.Code, Detail: f.Detail, BuildID: f.BuildID, Seq: 9, Mismatch: f.Mismatch}
	}
	// A history recorded before decision.failed carried its mismatch says it only in words.
	inWords := func(err error) *core.Blocked {
		b := blocked(err)
		b.Mismatch = nil
		return b
	}
	for name, tc := range map[string]struct {
		err  *core.NonDeterminismError
		want uiDiagnosis
	}{
		"Field": {
			&core.NonDeterminismError{RunID: "r", Kind: "step", ID: "charge", Field: "input", Recorded: `{"amount":42}`, New: `{"amount":43}`, Seq: 4},
			uiDiagnosis{Subject: `step "charge"`, Field: "input", Recorded: `{"amount":42}`, Produced: `{"amount":43}`, RecordedSeq: 4},
		},
		"RunField": {
			&core.NonDeterminismError{RunID: "r", Kind: "run", Field: "build_id", Recorded: `"b1"`, New: `"b2"`, Seq: 1},
			uiDiagnosis{Subject: "run", Field: "build_id", Recorded: `"b1"`, Produced: `"b2"`, RecordedSeq: 1},
		},
		"Decision": {
			&core.NonDeterminismError{RunID: "r", Kind: "decision", Field: "decision", Recorded: `ScheduleStep("a")`, New: `Sleep("b")`, Seq: 7},
			uiDiagnosis{Subject: "decision", Field: "decision", Recorded: `ScheduleStep("a")`, Produced: `Sleep("b")`, RecordedSeq: 7},
		},
		"Kind": {
			&core.NonDeterminismError{RunID: "r", Kind: "wait", ID: "x", Field: "kind", Recorded: "step", New: "wait", Seq: 3},
			uiDiagnosis{Subject: `ID "x"`, Field: "kind", Recorded: "step", Produced: "wait", RecordedSeq: 3},
		},
		"ValuesWithSeparators": {
			&core.NonDeterminismError{RunID: "r", Kind: "step", ID: "s", Field: "input", Recorded: `"at seq 1, but"`, New: `"x; y"`, Seq: 5},
			uiDiagnosis{Subject: `step "s"`, Field: "input", Recorded: `"at seq 1, but"`, Produced: `"x; y"`, RecordedSeq: 5},
		},
	} {
		for how, b := range map[string]*core.Blocked{"Recorded": blocked(tc.err), "InWords": inWords(tc.err)} {
			t.Run(name+"/"+how, func(t *testing.T) {
				d := diagnose(b)
				require.True(t, d.Parsed, "%s", d.Detail)
				require.Equal(t, core.FailureNonDeterminism, d.Kind)
				require.Equal(t, tc.err.Code(), d.Code)
				require.Equal(t, uint64(9), d.Seq)
				require.Equal(t, "b1", d.BuildID)
				require.Equal(t, tc.want.Subject, d.Subject)
				require.Equal(t, tc.want.Field, d.Field)
				require.Equal(t, tc.want.Recorded, d.Recorded)
				require.Equal(t, tc.want.Produced, d.Produced)
				require.Equal(t, tc.want.RecordedSeq, d.RecordedSeq)
				require.Contains(t, d.Hint, "possible causes:")
			})
		}
	}
	t.Run("OtherFailures", func(t *testing.T) {
		require.Nil(t, diagnose(nil))
		d := diagnose(blocked(errors.New("the definition is gone")))
		require.False(t, d.Parsed)
		require.Equal(t, "the definition is gone", d.Detail)
		d = diagnose(&core.Blocked{Kind: core.FailureNonDeterminism, Detail: "written by another version"})
		require.False(t, d.Parsed, "a detail of another shape is shown whole")
	})
}

func TestTimelineWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ last, at, from, to uint64 }{
		{10, 3, 1, 10},
		{1000, 1, 1, uiTimelineWindow},
		{1000, 500, 500 - uiTimelineWindow/2, 500 + uiTimelineWindow/2 - 1},
		{1000, 1000, 1000 - uiTimelineWindow + 1, 1000},
		{1000, 990, 1000 - uiTimelineWindow + 1, 1000},
	} {
		from, to := timelineWindow(tc.at, tc.last)
		require.Equal(t, [2]uint64{tc.from, tc.to}, [2]uint64{from, to}, "at %d of %d", tc.at, tc.last)
	}
}
