package history

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Redaction: a run's seed (from which its hook tokens derive) and its hook tokens are
// capabilities, not history. The queries serve them replaced by api.Redacted unless the caller
// may see them: an HTTP caller with a full token asking ?reveal=secrets (or any caller when no
// token is configured), and the NATS endpoints api.SubjectSecretsGet and
// api.SubjectSecretsHistory, which the deployed permissions grant no role (docs/operations.md).
//
// Redaction is structural (run.started's seed, hook.created's token, the snapshot's hooks) and
// then textual: every occurrence of the run's seed or of a hook token of at least
// minScrubbedSecret characters in the encoded answer (a step's input that carries a token, a
// URL built from one) is replaced too.

// minScrubbedSecret is the length from which a secret is scrubbed from the text of an answer:
// generated seeds (26 characters) and tokens (32) are; a short token chosen by a workflow
// (flow.WithToken) is redacted where it is recorded, not wherever its text appears.
const minScrubbedSecret = 16

// redactedToken is the marker that replaces the token of hook hookID: unique per hook, so that
// a redacted history still holds no token twice (core.Check).
func redactedToken(hookID string) string { return api.Redacted + ":" + hookID }

// snapshotSecrets returns the seed and hook tokens of s.
func snapshotSecrets(s *core.Snapshot) []string {
	if s == nil {
		return nil
	}
	out := []string{s.Seed}
	for _, h := range s.Hooks {
		out = append(out, h.Token)
	}
	return out
}

// eventSecrets returns the seeds and hook tokens recorded in hist.
func eventSecrets(hist []event.Envelope) []string {
	var out []string
	for _, e := range hist {
		switch p := e.Payload.(type) {
		case *event.RunStarted:
			out = append(out, p.Seed)
		case *event.HookCreated:
			out = append(out, p.Token)
		}
	}
	return out
}

// runSecrets returns the secrets of run runID known to the service now, for scrubbing a page
// of its history that may not hold the events recording them. It returns none when the run
// does not project (archived, damaged): such a run's page is redacted structurally only.
func (s *Service) runSecrets(ctx context.Context, runID string, atLeast uint64) []string {
	var out []string
	_ = s.updateSnaps.read(ctx, s.store, runID, atLeast, func(snap *core.Snapshot) error {
		out = snapshotSecrets(snap)
		return nil
	})
	return out
}

// redactSnapshot returns s with its hooks' tokens redacted; s is not modified.
func redactSnapshot(s *core.Snapshot) *core.Snapshot {
	if s == nil || (len(s.Hooks) == 0 && s.Seed == "") {
		return s
	}
	c := *s
	c.Seed = api.Redacted
	c.Hooks = make(map[string]*core.Hook, len(s.Hooks))
	for id, h := range s.Hooks {
		hc := *h
		hc.Token = redactedToken(h.ID)
		c.Hooks[id] = &hc
	}
	return &c
}

// redactEvents returns hist with run.started's seed and hook.created's token redacted; hist
// and its payloads are not modified (they may be shared with the store's cache).
func redactEvents(hist []event.Envelope) []event.Envelope {
	var out []event.Envelope
	for i, e := range hist {
		var np event.Payload
		switch p := e.Payload.(type) {
		case *event.RunStarted:
			c := *p
			c.Seed = api.Redacted
			np = &c
		case *event.HookCreated:
			c := *p
			c.Token = redactedToken(p.HookID)
			np = &c
		default:
			continue
		}
		if out == nil {
			out = slices.Clone(hist)
		}
		out[i].Payload = np
	}
	if out == nil {
		return hist
	}
	return out
}

// scrub replaces every occurrence in b of a secret of at least minScrubbedSecret characters
// by api.Redacted. b may be modified.
func scrub(b []byte, secrets []string) []byte {
	for _, sec := range secrets {
		if len(sec) >= minScrubbedSecret && bytes.Contains(b, []byte(sec)) {
			b = bytes.ReplaceAll(b, []byte(sec), []byte(api.Redacted))
		}
	}
	return b
}

// redactedGet answers a snapshot request with the run's secrets redacted.
func (s *Service) redactedGet(ctx context.Context, req api.GetRequest) (json.RawMessage, error) {
	resp, err := s.getRun(ctx, req)
	if err != nil {
		return nil, err
	}
	secrets := snapshotSecrets(resp.Snapshot)
	if req.At > 0 {
		secrets = append(secrets, s.runSecrets(ctx, req.RunID, req.AtLeast)...)
	}
	c := *resp
	c.Snapshot = redactSnapshot(resp.Snapshot)
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	return scrub(b, secrets), nil
}

// redactedHistory answers a history request with the run's secrets redacted.
func (s *Service) redactedHistory(ctx context.Context, req api.HistoryRequest) (json.RawMessage, error) {
	resp, err := s.historyPage(ctx, req)
	if err != nil {
		return nil, err
	}
	secrets := eventSecrets(resp.Events)
	if req.After > 0 {
		secrets = append(secrets, s.runSecrets(ctx, req.RunID, max(req.After, req.AtLeast))...)
	}
	c := *resp
	c.Events = redactEvents(resp.Events)
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	return scrub(b, secrets), nil
}
