package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/fault"
)

// inputTimeout bounds the commit of one input.
const inputTimeout = 30 * time.Second

// onMsg takes one NATS input. At most Concurrency are applied at once; beyond that the
// subscription waits, and NATS buffers (or, past its limits, drops) what arrives meanwhile.
func (s *Service) onMsg(m *nats.Msg) {
	s.stopMu.RLock()
	if s.stopped {
		s.stopMu.RUnlock()
		return // not acknowledged: the requester retries with another replica
	}
	s.inflight.Add(1)
	s.stopMu.RUnlock()
	s.slots <- struct{}{}
	go func() {
		defer func() {
			<-s.slots
			s.inflight.Done()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), inputTimeout)
		defer cancel()
		if isReset(m) {
			s.onReset(ctx, m)
			return
		}
		if strings.HasPrefix(m.Subject, api.SubjectSchedulePrefix) {
			s.onScheduleMsg(ctx, m) // schedule.go
			return
		}
		if s.natsPauses(ctx, m) {
			return
		}
		kind, resp, e := s.natsInput(ctx, m)
		if e == nil && s.cfg.Faults.Hit(fault.IngressBeforeReply) != nil {
			s.logger.Warn("injected fault: the answer of a committed input is lost", slog.String("subject", m.Subject))
			return
		}
		s.answer(m, kind, resp, e)
	}()
}

// natsInput decodes and applies one message; kind is the kind its subject names, or "unknown".
func (s *Service) natsInput(ctx context.Context, m *nats.Msg) (api.InputKind, *api.InputResponse, *api.IngressError) {
	in, e := parseSubject(m.Subject)
	if e != nil {
		return "unknown", nil, e
	}
	if int64(len(m.Data)) > s.cfg.MaxBodyBytes {
		return in.kind, nil, &api.IngressError{Code: api.CodeTooLarge, Message: fmt.Sprintf("the message is %d bytes; the limit is %d (FLOW_INGRESS_MAX_BODY_BYTES): keep large payloads elsewhere and send a reference", len(m.Data), s.cfg.MaxBodyBytes)}
	}
	var ev *ce.Event
	switch natsEncoding(m) {
	case binding.EncodingBinary, binding.EncodingStructured:
		var err error
		if ev, err = binding.ToEvent(ctx, cenats.NewMessage(m)); err != nil {
			return in.kind, nil, &api.IngressError{Code: api.CodeInvalidEvent, Message: fmt.Sprintf("the message is not a readable CloudEvent: %v", err)}
		}
		if e := fromEvent(in, ev); e != nil {
			return in.kind, nil, e
		}
	default:
		if ct := m.Header.Get("Content-Type"); !jsonMediaType(ct) {
			return in.kind, nil, &api.IngressError{Code: api.CodeMediaType, Message: fmt.Sprintf("Content-Type %q is not JSON; send application/json, or a CloudEvent", ct)}
		}
		id := m.Header.Get(api.HeaderIdempotencyKey)
		if id == "" {
			id = m.Header.Get(nats.MsgIdHdr)
		}
		if e := fromPlain(in, m.Data, id); e != nil {
			return in.kind, nil, e
		}
	}
	in.source = natsSource(m)
	ctx, span := startNATSSpan(ctx, m, ev, in.kind)
	defer span.End()
	resp, e := s.apply(ctx, in)
	endSpan(ctx, resp, e)
	return in.kind, resp, e
}

// natsEncoding tells a CloudEvent in binary mode (ce-specversion header) or structured mode
// (Content-Type application/cloudevents+json, or a JSON object with "specversion" and no
// Content-Type) from a plain message.
func natsEncoding(m *nats.Msg) binding.Encoding {
	if m.Header.Get("ce-specversion") != "" {
		return binding.EncodingBinary
	}
	ct := m.Header.Get("Content-Type")
	if strings.HasPrefix(ct, cloudEventsJSON) {
		return binding.EncodingStructured
	}
	if ct == "" && bytes.Contains(m.Data, []byte(`"specversion"`)) {
		var probe struct {
			SpecVersion json.RawMessage `json:"specversion"`
		}
		if json.Unmarshal(m.Data, &probe) == nil && probe.SpecVersion != nil {
			return binding.EncodingStructured
		}
	}
	return binding.EncodingUnknown
}

// parseSubject reads the kind and the names of an input subject.
func parseSubject(subject string) (*input, *api.IngressError) {
	rest := strings.TrimPrefix(subject, api.IngressPrefix)
	k, rest, _ := strings.Cut(rest, ".")
	kind, ok := api.ParseInputKind(k)
	if !ok || rest == "" {
		return nil, &api.IngressError{Code: api.CodeRouteNotFound, Message: fmt.Sprintf("subject %q is not an ingress subject; use flow.ingress.start.<definition>, flow.ingress.signal.<run>.<name>, flow.ingress.hook.<token>, flow.ingress.cancel.<run> or flow.ingress.terminate.<run>", subject)}
	}
	in := &input{kind: kind}
	switch kind {
	case api.KindStart:
		in.definition = rest
	case api.KindSignal:
		var ok bool
		if in.runID, in.name, ok = strings.Cut(rest, "."); !ok {
			return nil, &api.IngressError{Code: api.CodeInvalidName, Message: fmt.Sprintf("subject %q names no signal; use flow.ingress.signal.<run>.<name>", subject)}
		}
	case api.KindHook:
		in.token = rest
	case api.KindUpdate, api.KindUpdateWithStart, api.KindSignalWithStart:
		if e := in.parseUpdateSubject(subject, rest); e != nil {
			return nil, e
		}
	default:
		in.runID = rest
	}
	return in, nil
}

// answer replies to a request, or sends a rejected plain publish to the dead-letter subject.
func (s *Service) answer(m *nats.Msg, kind api.InputKind, resp *api.InputResponse, e *api.IngressError) {
	if m.Reply == "" {
		if e != nil {
			s.deadLetter(m, kind, e)
		}
		return
	}
	s.reply(m, "an input", resp, e)
}

// reply answers request m with resp, or with e when it failed (its code and HTTP status in the
// headers); what names the request in the log line of a reply that could not be sent.
func (s *Service) reply(m *nats.Msg, what string, resp any, e *api.IngressError) {
	reply := &nats.Msg{Subject: m.Reply, Header: nats.Header{}}
	var err error
	if e != nil {
		reply.Header.Set(api.HeaderErrorCode, string(e.Code))
		reply.Header.Set(api.HeaderStatus, strconv.Itoa(e.HTTPStatus()))
		if e.RetryAfter > 0 {
			reply.Header.Set("Retry-After", strconv.Itoa(e.RetryAfter))
		}
		reply.Data, err = json.Marshal(e)
	} else {
		reply.Header.Set(api.HeaderStatus, "200")
		reply.Data, err = json.Marshal(resp)
	}
	if err == nil {
		err = s.nc.PublishMsg(reply)
	}
	if err != nil {
		s.logger.Warn("answering "+what+" failed", slog.String("subject", m.Subject), slog.String("error", err.Error()))
	}
}

// deadLetter publishes a rejected message, with why, on the dead-letter subject of its kind.
func (s *Service) deadLetter(m *nats.Msg, kind api.InputKind, e *api.IngressError) {
	h := nats.Header{}
	for k, v := range m.Header {
		h[k] = v
	}
	h.Set(api.HeaderErrorCode, string(e.Code))
	h.Set(api.HeaderErrorMessage, e.Message)
	h.Set(api.HeaderOriginalSubject, m.Subject)
	h.Del(nats.MsgIdHdr) // the stream must keep every rejection, not deduplicate them
	dl := &nats.Msg{Subject: api.DeadLetterSubject(kind), Header: h, Data: m.Data}
	if err := s.nc.PublishMsg(dl); err != nil {
		s.logger.Warn("publishing a dead letter failed", slog.String("subject", m.Subject), slog.String("error", err.Error()))
		return
	}
	s.logger.Warn("input rejected", slog.String("subject", m.Subject), slog.String("code", string(e.Code)),
		slog.String("reason", e.Message), slog.String("dead_letter", dl.Subject))
}
