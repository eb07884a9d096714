package history

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
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

// publish sends the events of envs that f has not published yet.
func (p *feed) publish(f *followed, envs []event.Envelope) {
	def := f.s.Spec.Definition
	for _, env := range envs {
		if env.Seq <= f.published {
			continue
		}
		m, err := FeedMessage(def, env)
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

// FeedMessage builds the feed message of one event of a run of definition: a CloudEvent in
// binary mode, built with the CloudEvents SDK, whose data is the event's payload as JSON.
func FeedMessage(definition string, env event.Envelope) (*nats.Msg, error) {
	data, err := json.Marshal(env.Payload)
	if err != nil {
		return nil, err
	}
	e := ce.New()
	e.SetID(env.RunID + ":" + strconv.FormatUint(env.Seq, 10))
	e.SetSource(FeedSource)
	e.SetType(FeedTypePrefix + string(env.Type()))
	e.SetSubject(env.RunID)
	e.SetTime(env.Time)
	e.SetExtension(FeedExtSeq, strconv.FormatUint(env.Seq, 10))
	e.SetExtension(FeedExtDefinition, definition)
	if err := e.SetData(ce.ApplicationJSON, data); err != nil {
		return nil, err
	}
	var body bytes.Buffer
	header, err := cenats.WriteMsg(context.Background(), binding.ToMessage(&e), &body)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: FeedSubject(definition, env.RunID, env.Type()), Header: header, Data: body.Bytes()}, nil
}
