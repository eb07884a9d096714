// Package schemas holds the JSON Schemas (draft 2020-12) of Flow's stored events: the envelope
// and the payload of every type in the catalogue of package event. They describe the JSON that
// [event.Envelope] and the payload types write, for readers and writers that are not Go, and for
// code such as an ingress that checks payloads before decoding them.
//
// The files, embedded in [FS], are:
//
//   - envelope.json: the envelope {"run_id","seq","time","type","data"}, whose data must match
//     the schema of its type;
//   - events/<type>.json: one schema per event type, such as events/step.completed.json;
//   - defs.json: definitions the others share (retry policy, error info, durations, times, ...);
//   - ingress/<name>.json: the bodies the ingress service takes and answers (see
//     [IngressPath]): start_request, cancel_request, signal_payload, input_response and error.
//     The request schemas forbid unknown fields, as the ingress does.
//
// Each file's $id is [BaseURL] followed by its path, and the files refer to each other by
// relative paths, so they resolve the same way from https://flowrun.dev/schemas/ and from a
// checkout. Readers ignore unknown fields, so every object schema allows additional properties.
// The package's tests check the schemas against the Go types, field by field.
package schemas

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/flowrun/flow/pkg/event"
)

// FS holds the schema files, by the paths listed in the package documentation.
//
//go:embed envelope.json defs.json events/*.json ingress/*.json
var FS embed.FS

// BaseURL prefixes the path of every schema file to form its $id.
const BaseURL = "https://flowrun.dev/schemas/"

// EnvelopePath is the path of the envelope schema in FS.
const EnvelopePath = "envelope.json"

// EventPath returns the path in FS of the schema of event type t: "events/<t>.json".
func EventPath(t event.Type) string { return "events/" + string(t) + ".json" }

// Ingress bodies, by name, for IngressPath.
const (
	IngressStartRequest  = "start_request"
	IngressCancelRequest = "cancel_request"
	IngressSignalPayload = "signal_payload"
	IngressResponse      = "input_response"
	IngressError         = "error"
	// IngressWithStartRequest is the body of an update-with-start or a signal-with-start.
	IngressWithStartRequest = "with_start_request"
)

// IngressPath returns the path in FS of the schema of ingress body name: "ingress/<name>.json".
func IngressPath(name string) string { return "ingress/" + name + ".json" }

// NewCompiler returns a compiler holding every schema file as a resource under its $id, with
// format assertions on (so that "date-time" is checked). Use it to compile a schema this package
// does not compile, such as BaseURL+"defs.json#/$defs/retry_policy".
func NewCompiler() (*jsonschema.Compiler, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	err := fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".json" {
			return err
		}
		if dir, name := path.Split(p); dir == "events/" && !event.Type(strings.TrimSuffix(name, ".json")).Known() {
			return fmt.Errorf("schema %s: %q is not an event type", p, strings.TrimSuffix(name, ".json"))
		}
		f, err := FS.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			return fmt.Errorf("schema %s: %w", p, err)
		}
		obj, _ := doc.(map[string]any)
		if id, _ := obj["$id"].(string); id != BaseURL+p {
			return fmt.Errorf("schema %s: $id is %q, want %q", p, id, BaseURL+p)
		}
		if err := c.AddResource(BaseURL+p, doc); err != nil {
			return fmt.Errorf("schema %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Compile compiles the envelope schema and the payload schema of every catalogued event type.
// It fails if a type has no schema. The schemas validate decoded JSON values: decode with
// [jsonschema.UnmarshalJSON], which keeps numbers exact, and call [jsonschema.Schema.Validate].
func Compile() (envelope *jsonschema.Schema, payloads map[event.Type]*jsonschema.Schema, err error) {
	c, err := NewCompiler()
	if err != nil {
		return nil, nil, err
	}
	envelope, err = c.Compile(BaseURL + EnvelopePath)
	if err != nil {
		return nil, nil, fmt.Errorf("compiling %s: %w", EnvelopePath, err)
	}
	payloads = make(map[event.Type]*jsonschema.Schema)
	for _, t := range event.Types() {
		p := EventPath(t)
		if _, err := fs.Stat(FS, p); err != nil {
			return nil, nil, fmt.Errorf("event type %s has no schema: %w", t, err)
		}
		if payloads[t], err = c.Compile(BaseURL + p); err != nil {
			return nil, nil, fmt.Errorf("compiling %s: %w", p, err)
		}
	}
	return envelope, payloads, nil
}

// Validate decodes data, such as an envelope or an event's data, as JSON and validates it
// against s. The error of a failed validation is a *[jsonschema.ValidationError].
func Validate(s *jsonschema.Schema, data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return s.Validate(v)
}
