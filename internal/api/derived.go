package api

// The history service's doors: it is the one writer of the hook token routes (FLOW_HOOKS) and of
// the parked runs (FLOW_PARKED). A worker asks it, over NATS request/reply on the history
// service's micro service (flow-history, any replica), to claim the token of a hook before it
// commits the hook.created, and to park a run it cannot drive:
//
//	flow.derived.hooks.claim   HookClaim      -> HookClaimResponse
//	flow.derived.runs.park     parked.Run -> ParkResponse
//
// The doors are not under flow.api.>, which clients may publish to: only workers ask them (a
// client could otherwise take tokens its runs never created, or park runs). With no history
// service a request gets no responders at once; the worker fails the decision (or the park),
// and the task comes back. An error is a reply with an empty body and micro's error headers,
// as the history service answers queries.
const (
	DerivedPrefix    = "flow.derived."
	SubjectHookClaim = DerivedPrefix + "hooks.claim"
	SubjectPark      = DerivedPrefix + "runs.park"
)

// HookClaim asks for Token to route to hook HookID of run RunID (Engine.ClaimHook): created if
// the token is free, kept if it routes there already, taken over from a run that ended.
type HookClaim struct {
	Token  string `json:"token"`
	RunID  string `json:"run_id"`
	HookID string `json:"hook_id"`
}

// HookClaimResponse answers a HookClaim: TakenBy, when set, names the hook of a live run the
// token routes to instead, and nothing was written; else the token routes to the claimed hook.
type HookClaimResponse struct {
	TakenBy *HookRef `json:"taken_by,omitempty"`
}

// HookRef names a hook of a run.
type HookRef struct {
	RunID  string `json:"run_id"`
	HookID string `json:"hook_id"`
}

// ParkResponse answers a park request: Parked is false when the run had ended, and nothing was
// written.
type ParkResponse struct {
	Parked bool `json:"parked"`
}
