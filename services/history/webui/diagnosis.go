package webui

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/flowrun/flow/internal/core"
)

// uiDiagnosis is what the diagnosis panel shows of a blocked run: the failed decision as
// recorded (decision.failed at Seq), and for a non-determinism error the identity and field that
// differ, the value history recorded (at RecordedSeq) and the value the code produced instead.
type uiDiagnosis struct {
	Kind    string
	Code    string
	BuildID string
	// Seq is the sequence of the decision.failed event.
	Seq    uint64
	Detail string
	// Parsed is set when Detail is a non-determinism error whose parts were read back.
	Parsed bool
	// Subject is what was compared: `step "charge"`, "run", or "decision".
	Subject  string
	Field    string
	Recorded string
	Produced string
	// RecordedSeq is the sequence of the event that recorded the original value.
	RecordedSeq uint64
	// Hint is the error's "possible causes ...; what to do ..." text.
	Hint string
}

// The renderings of core.NonDeterminismError.Error, which decision.failed records as its detail
// (core.DecisionFailure): one per shape of message.
var (
	ndPrefix   = regexp.MustCompile(`^flow: \[(FLOW-[A-Z]+-\d+)\] non-determinism in run "[^"]*": (.*)$`)
	ndDecision = regexp.MustCompile(`^at seq (\d+) history has (.*), but the workflow code now gives (.*?); (possible causes: .*)$`)
	ndKind     = regexp.MustCompile(`^ID ("(?:[^"\\]|\\.)*") was recorded for a (.*) at seq (\d+), but the workflow code now uses it for a (.*?); (possible causes: .*)$`)
	ndField    = regexp.MustCompile(`^(.*?) field (\S+) was (.*) at seq (\d+), but the workflow code now gives (.*?); (possible causes: .*)$`)
)

// diagnose returns the diagnosis of b: a non-determinism error's parts from its recorded
// mismatch or, in a history recorded before decision.failed had one, read back from its
// detail; nil when b is nil.
func diagnose(b *core.Blocked) *uiDiagnosis {
	if b == nil {
		return nil
	}
	d := &uiDiagnosis{Kind: b.Kind, Code: b.Code, BuildID: b.BuildID, Seq: b.Seq, Detail: b.Detail}
	if b.Kind != core.FailureNonDeterminism {
		return d
	}
	if mm := b.Mismatch; mm != nil {
		switch {
		case mm.Field == "decision":
			d.Subject = "decision"
		case mm.Field == "kind":
			d.Subject = "ID " + strconv.Quote(mm.ID)
		case mm.ID == "":
			d.Subject = mm.Kind
		default:
			d.Subject = mm.Kind + " " + strconv.Quote(mm.ID)
		}
		d.Field, d.Recorded, d.Produced, d.RecordedSeq, d.Parsed = mm.Field, mm.Recorded, mm.Produced, mm.Seq, true
		if i := strings.Index(b.Detail, "possible causes:"); i >= 0 {
			d.Hint = b.Detail[i:]
		}
		return d
	}
	return parseDiagnosis(d)
}

// parseDiagnosis fills d's parts from the rendering of a non-determinism error in d.Detail,
// leaving d.Parsed false when the detail has another shape.
func parseDiagnosis(d *uiDiagnosis) *uiDiagnosis {
	m := ndPrefix.FindStringSubmatch(d.Detail)
	if m == nil {
		return d
	}
	rest := m[2]
	seq := func(s string) uint64 { n, _ := strconv.ParseUint(s, 10, 64); return n }
	switch {
	case ndDecision.MatchString(rest):
		p := ndDecision.FindStringSubmatch(rest)
		d.Subject, d.Field, d.RecordedSeq, d.Recorded, d.Produced, d.Hint = "decision", "decision", seq(p[1]), p[2], p[3], p[4]
	case ndKind.MatchString(rest):
		p := ndKind.FindStringSubmatch(rest)
		id, err := strconv.Unquote(p[1])
		if err != nil {
			id = p[1]
		}
		d.Subject, d.Field, d.Recorded, d.RecordedSeq, d.Produced, d.Hint = "ID "+strconv.Quote(id), "kind", p[2], seq(p[3]), p[4], p[5]
	case ndField.MatchString(rest):
		p := ndField.FindStringSubmatch(rest)
		d.Subject, d.Field, d.Recorded, d.RecordedSeq, d.Produced, d.Hint = p[1], p[2], p[3], seq(p[4]), p[5], p[6]
	default:
		return d
	}
	d.Parsed = true
	d.Hint = strings.TrimSpace(d.Hint)
	return d
}
