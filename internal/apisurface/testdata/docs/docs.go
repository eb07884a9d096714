// Package docs is apisurface's test input for Undocumented: each name says whether it is
// documented.
package docs

// Good is documented.
type Good struct {
	// Field is documented.
	Field int
	// Pair names A and B; both are documented by it.
	A, B int
	// Total is ..., in Chunks chunks.
	Total  int
	Chunks int
	Line   int // documented by its line comment

	Bare     int
	internal int
}

// A Sample is documented, after an article.
type Sample int

// The Method is documented, after an article.
func (Sample) Method() {}

// Misnamed's type is documented by the possessive.
type Misnamed2 int

// Error implements error.
func (Good) Error() string { return "" }

func (Good) String() string { return "" } // a standard interface's method: no comment needed

func (Good) Undocumented() {}

// Badly starts with another word.
func Misnamed() {}

func Bare() {}

func unexported() {}

// Iface is documented.
type Iface interface {
	// Do is documented.
	Do()
	Bare()
}

// Do implements Iface.
func (Sample) Do() {}

type BareType int

// Consts are documented by the group's comment.
const (
	C1 = 1
	C2 = 2
)

const (
	D1 = 1 // documented
	D2 = 2
)

var V = 1
