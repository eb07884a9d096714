// Package cloudevent writes the CloudEvents that cross Flow's processes over NATS (history
// commits, resume tasks, the event feed) in NATS binary mode, from the CloudEvents SDK's event
// model (event.EventContextV1) and its attribute names (binding/spec). The SDK's NATS binding
// reads them back (cenats.NewMessage, binding.ToEvent); the tests of each writer do. It also
// writes and reads the distributed-tracing extension (ce-traceparent, ce-tracestate) that carries
// a span context from one process to the next.
package cloudevent

import (
	"fmt"
	"net/url"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding/spec"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
)

// Header names of the attributes, as the SDK's NATS binding names them ("ce-" and the
// attribute's name).
var (
	natsSpec          = spec.WithPrefix("ce-").Version(ce.CloudEventsVersionV1)
	HeaderSpecVersion = natsSpec.AttributeFromKind(spec.SpecVersion).PrefixedName()
	HeaderID          = natsSpec.AttributeFromKind(spec.ID).PrefixedName()
	HeaderSource      = natsSpec.AttributeFromKind(spec.Source).PrefixedName()
	HeaderType        = natsSpec.AttributeFromKind(spec.Type).PrefixedName()
	HeaderContentType = natsSpec.AttributeFromKind(spec.DataContentType).PrefixedName()
	HeaderSubject     = natsSpec.AttributeFromKind(spec.Subject).PrefixedName()
	HeaderTime        = natsSpec.AttributeFromKind(spec.Time).PrefixedName()
)

// ExtensionHeader returns the header name of extension name.
func ExtensionHeader(name string) string {
	if h, ok := knownExtensions[name]; ok {
		return h
	}
	return natsSpec.Prefix() + name
}

// knownExtensions caches the header names of Flow's extensions, written on every commit.
var knownExtensions = func() map[string]string {
	m := map[string]string{}
	for _, name := range []string{"flowseq", "flowcount", "flowcommit", "flowtypes", "flowdefinition", "flowrunid", "flowqueue", "traceparent"} {
		m[name] = natsSpec.Prefix() + name
	}
	return m
}()

// Source parses a ce-source; it panics on a malformed one (sources are constants).
func Source(s string) types.URIRef {
	u, err := url.Parse(s)
	if err != nil {
		panic(fmt.Sprintf("cloudevent: source %q: %v", s, err))
	}
	return types.URIRef{URL: *u}
}

// NewContext returns an event context with JSON data, the given source and type, and room for
// extensions.
func NewContext(source types.URIRef, ceType string) *ce.EventContextV1 {
	ct, subject := ce.ApplicationJSON, ""
	return &ce.EventContextV1{Source: source, Type: ceType, DataContentType: &ct, Subject: &subject,
		Time: &types.Timestamp{}, Extensions: map[string]any{}}
}

// WriteHeaders writes ec into h as NATS binary-mode headers: those the SDK's NATS binding
// (cenats.WriteMsg) writes for it, at a fraction of its cost (it formats every value through
// fmt and reflection), for the hot paths. The values are appended to values, whose result it
// returns for reuse; h's earlier entries are overwritten, so a reused h must have held the
// headers of a context with the same extensions. ec's optional attributes that are nil are
// left out. Extension values must be strings (others are formatted with fmt).
func WriteHeaders(ec *ce.EventContextV1, h nats.Header, values []string) []string {
	add := func(name, v string) {
		values = append(values, v)
		h[name] = values[len(values)-1 : len(values) : len(values)]
	}
	add(HeaderSpecVersion, ec.GetSpecVersion())
	add(HeaderID, ec.ID)
	add(HeaderSource, ec.Source.String())
	add(HeaderType, ec.Type)
	if ec.DataContentType != nil {
		add(HeaderContentType, *ec.DataContentType)
	}
	if ec.Subject != nil {
		add(HeaderSubject, *ec.Subject)
	}
	if ec.Time != nil {
		add(HeaderTime, ec.Time.Time.UTC().Format(time.RFC3339Nano))
	}
	for name, x := range ec.Extensions {
		v, ok := x.(string)
		if !ok {
			v = fmt.Sprint(x)
		}
		add(ExtensionHeader(name), v)
	}
	return values
}
