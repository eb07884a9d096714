package history

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding/spec"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/pkg/event"
)

// Public feed: every committed event, once, as its own CloudEvent in NATS binary mode.
const (
	// FeedPrefix prefixes the feed's subjects: flow.events.<definition>.<run>.<type>, where
	// <type> is the event type and so holds a dot (flow.events.order.r1.step.completed).
	FeedPrefix = "flow.events."
	// FeedSource is the ce-source of feed events.
	FeedSource = "flow/history"
	// FeedTypePrefix prefixes ce-type: "dev.flow." + the event type.
	FeedTypePrefix = "dev.flow."
	// Extensions carried by every feed event: the run's sequence of the event, and the run's
	// workflow definition.
	FeedExtSeq        = "flowseq"
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
type feed struct {
	nc *nats.Conn
}

func newFeed(nc *nats.Conn) (*feed, error) { return &feed{nc: nc}, nil }

// publish sends the events of envs, whose payloads' JSON is payloads, that f has not published
// yet.
func (p *feed) publish(f *followed, envs []event.Envelope, payloads []json.RawMessage) {
	def := f.s.Spec.Definition
	for i, env := range envs {
		if env.Seq <= f.published {
			continue
		}
		m, err := feedMessage(def, env, payloads[i])
		if err != nil {
			continue // the event was stored, so it encodes; nothing to publish otherwise
		}
		// A publish fails only when the connection is closed: the service is stopping, and
		// the commit is not acknowledged.
		if p.nc.PublishMsg(m) == nil {
			f.published = env.Seq
		}
	}
}

// FeedMessage builds the feed message of one event of a run of definition: a CloudEvent in NATS
// binary mode, built on the CloudEvents SDK's event model (event.EventContextV1) and attribute
// names (binding/spec), whose data is the event's payload as JSON. The SDK's NATS binding reads
// it (cenats.NewMessage, binding.ToEvent).
func FeedMessage(definition string, env event.Envelope) (*nats.Msg, error) {
	data, err := json.Marshal(env.Payload)
	if err != nil {
		return nil, err
	}
	return feedMessage(definition, env, data)
}

func feedMessage(definition string, env event.Envelope, data []byte) (*nats.Msg, error) {
	id, seq, subject, contentType := env.RunID+":"+strconv.FormatUint(env.Seq, 10), strconv.FormatUint(env.Seq, 10), env.RunID, ce.ApplicationJSON
	ec := &ce.EventContextV1{ID: id, Source: feedSource, Type: FeedTypePrefix + string(env.Type()), DataContentType: &contentType,
		Subject: &subject, Time: &types.Timestamp{Time: env.Time}, Extensions: map[string]any{FeedExtSeq: seq, FeedExtDefinition: definition}}
	return &nats.Msg{Subject: FeedSubject(definition, env.RunID, env.Type()), Header: binaryHeaders(ec), Data: data}, nil
}

// feedSource is FeedSource as a CloudEvents URI reference.
var feedSource = func() types.URIRef {
	u, err := url.Parse(FeedSource)
	if err != nil {
		panic(err)
	}
	return types.URIRef{URL: *u}
}()

// Header names of the attributes, as the SDK's NATS binding names them ("ce-" and the
// attribute's name).
var (
	natsSpec          = spec.WithPrefix("ce-").Version(ce.CloudEventsVersionV1)
	headerSpecVersion = natsSpec.AttributeFromKind(spec.SpecVersion).PrefixedName()
	headerID          = natsSpec.AttributeFromKind(spec.ID).PrefixedName()
	headerSource      = natsSpec.AttributeFromKind(spec.Source).PrefixedName()
	headerType        = natsSpec.AttributeFromKind(spec.Type).PrefixedName()
	headerContentType = natsSpec.AttributeFromKind(spec.DataContentType).PrefixedName()
	headerSubject     = natsSpec.AttributeFromKind(spec.Subject).PrefixedName()
	headerTime        = natsSpec.AttributeFromKind(spec.Time).PrefixedName()
)

// binaryHeaders writes ec, a context of the SDK's event model, as NATS binary-mode headers:
// those the SDK's NATS binding (cenats.WriteMsg) writes for it, at a fraction of its cost (it
// formats every value through fmt and reflection), on the history service's hot path. The feed
// test reads them back with the binding.
func binaryHeaders(ec *ce.EventContextV1) nats.Header {
	h := make(nats.Header, 7+len(ec.Extensions))
	values := make([]string, 0, 7+len(ec.Extensions))
	add := func(name, v string) {
		values = append(values, v)
		h[name] = values[len(values)-1 : len(values) : len(values)]
	}
	add(headerSpecVersion, ec.GetSpecVersion())
	add(headerID, ec.ID)
	add(headerSource, ec.Source.String())
	add(headerType, ec.Type)
	add(headerContentType, *ec.DataContentType)
	add(headerSubject, *ec.Subject)
	add(headerTime, ec.Time.Time.UTC().Format(time.RFC3339Nano))
	for name, x := range ec.Extensions {
		v, ok := x.(string)
		if !ok {
			v = fmt.Sprint(x)
		}
		add(natsSpec.Prefix()+name, v)
	}
	return h
}
