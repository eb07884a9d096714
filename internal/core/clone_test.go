package core_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// TestPropertyClone: a clone equals its original, shares no mutable state with it (applying the
// rest of the history to the original leaves the clone as the projection of the prefix), and
// goes on as the original does.
func TestPropertyClone(t *testing.T) {
	t.Parallel()
	eachCut(t, 11, func(seed uint64, hist []event.Envelope, cut int, orig *core.Snapshot) {
		clone := orig.Clone()
		require.True(t, reflect.DeepEqual(orig, clone), "seed %d: the clone differs from its original", seed)
		requireUnshared(t, reflect.ValueOf(orig), reflect.ValueOf(clone), "Snapshot")

		require.NoError(t, orig.ApplyAll(hist[cut:]))
		prefix, err := core.Project(hist[0].RunID, hist[:cut])
		require.NoError(t, err)
		require.True(t, reflect.DeepEqual(prefix, clone), "seed %d: applying events to the original changed the clone", seed)

		require.NoError(t, clone.ApplyAll(hist[cut:]))
		require.True(t, reflect.DeepEqual(orig, clone), "seed %d: the clone went on differently", seed)
	})
}

// requireUnshared fails if a and b, equal values, share a map or a pointer to a struct
// anywhere: the mutable state of a snapshot. Byte slices (JSON documents), string slices and
// pointers to event records are values Apply never changes in place, and may be shared.
func requireUnshared(t *testing.T, a, b reflect.Value, path string) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return
		}
		if a.Elem().Type().PkgPath() == "github.com/flowrun/flow/pkg/event" {
			return // event records (errors, parent links, mismatches): replaced, never changed
		}
		if a.Elem().Kind() == reflect.Struct {
			require.NotEqual(t, a.Pointer(), b.Pointer(), "%s is shared by the clone", path)
		}
		requireUnshared(t, a.Elem(), b.Elem(), path)
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return
		}
		require.NotEqual(t, a.Pointer(), b.Pointer(), "map %s is shared by the clone", path)
		for _, k := range a.MapKeys() {
			requireUnshared(t, a.MapIndex(k), b.MapIndex(k), path+"["+k.String()+"]")
		}
	case reflect.Slice:
		if e := a.Type().Elem().Kind(); e == reflect.Uint8 || e == reflect.String {
			return
		}
		if a.Len() > 0 && a.Type().Elem().Kind() != reflect.Pointer {
			require.NotEqual(t, a.Pointer(), b.Pointer(), "slice %s is shared by the clone", path)
		}
		for i := range a.Len() {
			requireUnshared(t, a.Index(i), b.Index(i), path)
		}
	case reflect.Struct:
		for i := range a.NumField() {
			f := a.Type().Field(i)
			if f.Name == "prev" || f.Name == "next" {
				continue // the unsettled list's links, checked through the list itself
			}
			requireUnshared(t, a.Field(i), b.Field(i), path+"."+f.Name)
		}
	}
}
