package examples

import (
	"github.com/flowrun/flow/pkg/flow"
)

// ApprovalNote is the update "note" of the approval workflow: a reviewer's note on the pending
// request, answered at once (docs/updates.md). It rejects an empty note, as a validator does.
const ApprovalNote = "note"

// NoteResult is the result of an approval's note: the note and how many updates the run has
// received so far, this one included.
type NoteResult struct {
	Noted   string `json:"noted"`
	Updates int    `json:"updates"`
}

func registerApprovalUpdates(reg *flow.Registry) {
	flow.RegisterUpdate(reg, "approval", ApprovalNote, flow.UpdateHandler[string]{
		Validate: func(_ *flow.Context, _ *flow.Update, note string) error {
			if note == "" {
				return flow.NewError(flow.KindInvalidInput, "a note needs text, e.g. --payload '\"looks good\"'")
			}
			return nil
		},
		Complete: func(ctx *flow.Context, _ *flow.Update, note string) (any, error) {
			return NoteResult{Noted: note, Updates: len(ctx.Updates())}, nil
		},
	})
}
