package schemas_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/schemas"
)

func compileIngress(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	c, err := schemas.NewCompiler()
	require.NoError(t, err)
	s, err := c.Compile(schemas.BaseURL + schemas.IngressPath(name))
	require.NoError(t, err)
	return s
}

// The ingress schemas describe the wire types of internal/api, field by field, and accept what
// the ingress accepts.
func TestIngressSchemas(t *testing.T) {
	t.Parallel()
	for name, goType := range map[string]reflect.Type{
		schemas.IngressStartRequest:     reflect.TypeFor[api.StartRequest](),
		schemas.IngressCancelRequest:    reflect.TypeFor[api.CancelRequest](),
		schemas.IngressResponse:         reflect.TypeFor[api.InputResponse](),
		schemas.IngressError:            reflect.TypeFor[api.IngressError](),
		schemas.IngressWithStartRequest: reflect.TypeFor[api.WithStartRequest](),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			props, required := propertyNames(t, rawSchema(t, schemas.IngressPath(name)))
			all, always := jsonFields(t, goType)
			require.Equal(t, all, props)
			require.Equal(t, always, required)
		})
	}

	t.Run("ErrorCodes", func(t *testing.T) {
		t.Parallel()
		code := object(t, object(t, rawSchema(t, schemas.IngressPath(schemas.IngressError))["properties"], "properties")["code"], "code")
		var enum []string
		for _, c := range code["enum"].([]any) {
			enum = append(enum, c.(string))
		}
		var want []string
		for _, c := range api.IngressCodes() {
			want = append(want, string(c))
		}
		slices.Sort(enum)
		slices.Sort(want)
		require.Equal(t, want, enum)
	})

	t.Run("Examples", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name, doc string
			ok        bool
		}{
			{schemas.IngressStartRequest, `{}`, true},
			{schemas.IngressStartRequest, `{"run_id":"order-1","queue":"default","input":{"sku":"a"}}`, true},
			{schemas.IngressStartRequest, `{"run_id":"a b"}`, false},
			{schemas.IngressStartRequest, `{"run_id":"o-1","on_conflict":"terminate_existing","reuse":"allow_failed_only","delay":"10m","request_id":"r-1"}`, true},
			{schemas.IngressStartRequest, `{"dedup_key":"invoice 42","dedup_window":"1h"}`, true},
			{schemas.IngressStartRequest, `{"debounce":{"key":"doc-9","period":"30s"}}`, true},
			{schemas.IngressStartRequest, `{"on_conflict":"replace"}`, false},
			{schemas.IngressStartRequest, `{"delay":"soon"}`, false},
			{schemas.IngressStartRequest, `{"debounce":{"period":"30s"}}`, false},
			{schemas.IngressStartRequest, `{"inptu":1}`, false},
			{schemas.IngressCancelRequest, `{"reason":"changed my mind"}`, true},
			{schemas.IngressCancelRequest, `{"why":"x"}`, false},
			{schemas.IngressSignalPayload, `{"note":"ok"}`, true},
			{schemas.IngressSignalPayload, `null`, true},
			{schemas.IngressResponse, `{"run_id":"r1","created":true}`, true},
			{schemas.IngressResponse, `{}`, false},
			{schemas.IngressError, `{"code":"run_ended","message":"run r1 has ended"}`, true},
			{schemas.IngressError, `{"code":"oops","message":"x"}`, false},
		} {
			err := validate(t, compileIngress(t, tt.name), []byte(tt.doc))
			if tt.ok {
				require.NoError(t, err, "%s %s", tt.name, tt.doc)
			} else {
				require.Error(t, err, "%s %s", tt.name, tt.doc)
			}
		}
	})

	t.Run("ErrorBodiesOfTheServiceValidate", func(t *testing.T) {
		t.Parallel()
		s := compileIngress(t, schemas.IngressError)
		for _, c := range api.IngressCodes() {
			b, err := json.Marshal(api.IngressError{Code: c, Message: "m"})
			require.NoError(t, err)
			require.NoError(t, validate(t, s, b), c)
		}
	})
}
