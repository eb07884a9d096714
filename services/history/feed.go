package history

import (
	"encoding/json"
	"strconv"

	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/extensions"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Public feed: every committed event, once, as its own CloudEvent in NATS binary mode.
const (
	// FeedPrefix prefixes the feed's subjects: flow.events.<definition>.<run>.<type>, where
	// <type> is the event type and so holds a dot (flow.events.order.r1.step.completed).
	FeedPrefix = api.FeedPrefix
	// FeedSource is the ce-source of feed events.
	FeedSource = "flow/history"
	// FeedTypePrefix prefixes ce-type: "dev.flow." + the event type.
	FeedTypePrefix = "dev.flow."
	// Extensions carried by every feed event: the run's sequence of the event, and the run's
	// workflow definition. An event of a run whose run.started recorded a trace context also
	// carries it in the distributed-tracing extension (ce-traceparent).
	FeedExtSeq        = api.FeedExtSeq
	FeedExtDefinition = "flowdefinition"
)

// FeedSubject returns the subject of an event of run runID, a run of definition.
func FeedSubject(definition, runID string, t event.Type) string {
	return FeedPrefix + definition + "." + runID + "." + string(t)
}

// feed publishes the public event feed on core NATS: subscribers that are connected get every
// event in order per run; the feed keeps nothing, and a subscriber that needs to catch up reads
// the run's history. An event is published once in normal operation; after a crash of the
// history service it may be published again, with the same ce-id ("<run>:<seq>").
//
// Each lane has its own feed, which reuses its message, headers and event context from one
// event to the next (a publish copies them out before it returns): not safe for concurrent use.
type feed struct {
	nc     *nats.Conn
	ec     ce.EventContextV1
	msg    nats.Msg
	values []string
	// subject and contentType back ec's pointers; ceTypes caches ce-type by event type.
	subject, contentType string
	ceTypes              map[event.Type]string
}

func newFeed(nc *nats.Conn) *feed {
	f := &feed{nc: nc, contentType: ce.ApplicationJSON, ceTypes: map[event.Type]string{}}
	f.ec = ce.EventContextV1{Source: feedSource, DataContentType: &f.contentType, Subject: &f.subject,
		Time: &types.Timestamp{}, Extensions: map[string]any{}}
	f.msg.Header = nats.Header{}
	return f
}

// publish sends the events of envs, whose payloads' JSON is payloads, that fr has not published
// yet, with the run's secrets redacted (redact.go): the client role reads the feed.
func (p *feed) publish(fr *followed, envs []event.Envelope, payloads []json.RawMessage) {
	def := fr.s.Spec.Definition
	secrets := snapshotSecrets(fr.s)
	for i, env := range envs {
		if env.Seq <= fr.published {
			continue
		}
		data := feedData(env, payloads[i], secrets)
		ceType, ok := p.ceTypes[env.Type()]
		if !ok {
			ceType = FeedTypePrefix + string(env.Type())
			p.ceTypes[env.Type()] = ceType
		}
		p.build(def, fr.s.TraceParent, env, ceType, data)
		// A publish fails only when the connection is closed: the service is stopping, and
		// the commit is not acknowledged.
		if p.nc.PublishMsg(&p.msg) == nil {
			fr.published = env.Seq
		}
	}
}

// publishDeleted sends a run's run.deleted, env, whose payload's JSON is data: the run's
// definition is the one its record keeps.
func (p *feed) publishDeleted(env event.Envelope, data json.RawMessage) {
	def := "unknown"
	if d, ok := env.Payload.(*event.RunDeleted); ok {
		if sum, err := core.Tombstone(env.RunID, env.Seq, env.Time, d); err == nil && sum.Definition != "" {
			def = sum.Definition
		}
	}
	p.build(def, "", env, FeedTypePrefix+string(env.Type()), data)
	_ = p.nc.PublishMsg(&p.msg)
}

// build makes p.msg the feed message of env, an event of a run of definition, whose trace
// context is traceParent ("" for none) and whose payload's JSON is data.
func (p *feed) build(definition, traceParent string, env event.Envelope, ceType string, data []byte) {
	seq := strconv.FormatUint(env.Seq, 10)
	p.subject = env.RunID
	p.ec.ID, p.ec.Type, p.ec.Time.Time = env.RunID+":"+seq, ceType, env.Time
	p.ec.Extensions[FeedExtSeq], p.ec.Extensions[FeedExtDefinition] = seq, definition
	if traceParent != "" {
		p.ec.Extensions[extensions.TraceParentExtension] = traceParent
	} else if _, had := p.ec.Extensions[extensions.TraceParentExtension]; had {
		// The headers are reused: the previous event's run had a trace context, this one none.
		delete(p.ec.Extensions, extensions.TraceParentExtension)
		delete(p.msg.Header, cloudevent.HeaderTraceParent)
	}
	p.values = cloudevent.WriteHeaders(&p.ec, p.msg.Header, p.values[:0])
	p.msg.Subject, p.msg.Data = FeedSubject(definition, env.RunID, env.Type()), data
}

// FeedMessage builds the feed message of one event of a run of definition: a CloudEvent in NATS
// binary mode, built on the CloudEvents SDK's event model (event.EventContextV1) and attribute
// names (binding/spec), whose data is the event's payload as JSON. The SDK's NATS binding reads
// it (cenats.NewMessage, binding.ToEvent).
func FeedMessage(definition string, env event.Envelope) (*nats.Msg, error) {
	data, err := json.Marshal(redactEvents([]event.Envelope{env})[0].Payload)
	if err != nil {
		return nil, err
	}
	p := newFeed(nil)
	p.build(definition, "", env, FeedTypePrefix+string(env.Type()), data)
	return &p.msg, nil
}

// feedData is the feed's data of env, whose payload's JSON is data: with its seed or hook token
// redacted, and secrets scrubbed from its text.
func feedData(env event.Envelope, data json.RawMessage, secrets []string) []byte {
	switch env.Payload.(type) {
	case *event.RunStarted, *event.HookCreated:
		if b, err := json.Marshal(redactEvents([]event.Envelope{env})[0].Payload); err == nil {
			data = b
		}
	}
	return scrub(data, secrets)
}

// feedSource is FeedSource as a CloudEvents URI reference.
var feedSource = cloudevent.Source(FeedSource)
