package apisurface

import (
	"slices"
	"testing"
)

func TestUndocumented(t *testing.T) {
	want := []string{
		"const D2: no doc comment",
		"field Good.Bare: no doc comment",
		"func Bare: no doc comment",
		"func Misnamed: the doc comment does not start with \"Misnamed\"",
		"method Good.Undocumented: no doc comment",
		"method Iface.Bare: no doc comment",
		"type BareType: no doc comment",
		"type Misnamed2: the doc comment does not start with \"Misnamed2\"",
		"var V: no doc comment",
	}
	got, err := Undocumented("testdata/docs", true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Undocumented:\n got %q\nwant %q", got, want)
	}
	got, err = Undocumented("testdata/docs", false)
	if err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "field Good.Bare: no doc comment" })
	if !slices.Equal(got, want) {
		t.Errorf("Undocumented without fields:\n got %q\nwant %q", got, want)
	}
}
