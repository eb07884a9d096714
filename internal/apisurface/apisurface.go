// Package apisurface describes the exported surface of a Go package, one line per exported
// name with its signature, for the checked-in API descriptions (pkg/flow/api.txt, ...) that
// make every change to a public package visible in review. A package's api_test.go compares
// its description with the file and rewrites it with -rewrite.
package apisurface

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Describe returns the exported surface of the package in dir (its non-test files): sorted
// lines, each one of
//
//	const Name[ Type][ = value]
//	var Name[ Type][ = value]
//	func Name(params) results
//	type Name <underlying, or = aliased>    (a struct or an interface on one line each: "struct", "interface")
//	field Type.Name FieldType               (an exported field of an exported struct)
//	method (T) Name(params) results         (a method of an exported type, or of an exported interface)
//
// (T is the receiver's type: *T for a pointer receiver.)
//
// and, first, "package <name>".
func Describe(dir string) (string, error) {
	fset := token.NewFileSet()
	pkgs, err := parseDir(fset, dir, 0)
	if err != nil {
		return "", err
	}
	if len(pkgs) != 1 {
		return "", fmt.Errorf("apisurface: %s holds %d packages, want 1", dir, len(pkgs))
	}
	var files []*ast.File
	var name string
	for n, p := range pkgs {
		name = n
		files = append(files, p.Files...)
	}
	d, err := doc.NewFromFiles(fset, files, "x/"+name)
	if err != nil {
		return "", err
	}
	s := &surface{fset: fset}
	s.values("const", d.Consts)
	s.values("var", d.Vars)
	s.funcs(d.Funcs)
	for _, t := range d.Types {
		s.typ(t)
	}
	slices.Sort(s.lines)
	s.lines = slices.Compact(s.lines)
	return "package " + name + "\n" + strings.Join(s.lines, "\n") + "\n", nil
}

type surface struct {
	fset  *token.FileSet
	lines []string
}

// text prints node on one line.
func (s *surface) text(node any) string {
	var b bytes.Buffer
	if err := (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, s.fset, node); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func (s *surface) add(format string, args ...any) {
	s.lines = append(s.lines, fmt.Sprintf(format, args...))
}

func (s *surface) values(kind string, vs []*doc.Value) {
	for _, v := range vs {
		for _, spec := range v.Decl.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !n.IsExported() {
					continue
				}
				line := kind + " " + n.Name
				if vs.Type != nil {
					line += " " + s.text(vs.Type)
				}
				if i < len(vs.Values) {
					line += " = " + s.text(vs.Values[i])
				}
				s.add("%s", line)
			}
		}
	}
}

func (s *surface) funcs(fs []*doc.Func) {
	for _, f := range fs {
		if !ast.IsExported(f.Name) {
			continue
		}
		decl := *f.Decl
		decl.Doc, decl.Body = nil, nil
		s.add("%s", s.text(&decl))
	}
}

func (s *surface) typ(t *doc.Type) {
	s.values("const", t.Consts)
	s.values("var", t.Vars)
	s.funcs(t.Funcs)
	for _, m := range t.Methods {
		if !ast.IsExported(m.Name) {
			continue
		}
		decl := *m.Decl
		decl.Doc, decl.Body = nil, nil
		// The receiver's type, not its name: renaming a receiver changes no API.
		recv := s.text(decl.Recv.List[0].Type)
		decl.Recv = nil
		s.add("method (%s) %s", recv, strings.TrimPrefix(s.text(&decl), "func "))
	}
	for _, spec := range t.Decl.Specs {
		ts := spec.(*ast.TypeSpec)
		if !ts.Name.IsExported() {
			continue
		}
		tparams := ""
		if ts.TypeParams != nil {
			tparams = s.text(ts.TypeParams)
			tparams = "[" + strings.TrimSuffix(strings.TrimPrefix(tparams, "("), ")") + "]"
		}
		name := ts.Name.Name + tparams
		switch u := ts.Type.(type) {
		case *ast.StructType:
			if ts.Assign.IsValid() {
				s.add("type %s = %s", name, s.text(u))
				continue
			}
			s.add("type %s struct", name)
			for _, f := range u.Fields.List {
				for _, n := range f.Names {
					if n.IsExported() {
						s.add("field %s.%s %s", ts.Name.Name, n.Name, s.text(f.Type))
					}
				}
				if len(f.Names) == 0 { // embedded
					s.add("field %s.%s (embedded)", ts.Name.Name, s.text(f.Type))
				}
			}
		case *ast.InterfaceType:
			s.add("type %s interface", name)
			for _, m := range u.Methods.List {
				for _, n := range m.Names {
					if n.IsExported() {
						s.add("method (%s) %s%s", ts.Name.Name, n.Name, strings.TrimPrefix(s.text(m.Type), "func"))
					}
				}
				if len(m.Names) == 0 {
					s.add("method (%s) %s (embedded)", ts.Name.Name, s.text(m.Type))
				}
			}
		default:
			if ts.Assign.IsValid() {
				s.add("type %s = %s", name, s.text(u))
			} else {
				s.add("type %s %s", name, s.text(u))
			}
		}
	}
}

// Check compares the description of the package in dir with the file at path, after writing
// it there when rewrite is set. It returns a message saying what differs, or "".
func Check(dir, path string, rewrite bool) (string, error) {
	want, err := Describe(dir)
	if err != nil {
		return "", err
	}
	if rewrite {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			return "", err
		}
	}
	got, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	if string(got) == want {
		return "", nil
	}
	return diff(string(got), want), nil
}

// diff lists the lines only the file has ("-") and those only the package has ("+").
func diff(file, pkg string) string {
	in := func(text string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(text, "\n") {
			m[l] = true
		}
		return m
	}
	f, p := in(file), in(pkg)
	var b strings.Builder
	for _, l := range strings.Split(file, "\n") {
		if !p[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(pkg, "\n") {
		if !f[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	if b.Len() == 0 {
		b.WriteString("(the same lines in another order)\n")
	}
	return b.String()
}

// Undocumented returns the exported names of the package in dir (its non-test files) that lack
// a doc comment, sorted, each with the reason, e.g. "func Dial: no doc comment". A name counts
// as documented when:
//
//   - a type, a func or a method (also one of an exported interface) has a doc comment whose
//     first word, after an optional "A", "An" or "The", is its name (as go doc and golint expect);
//   - a const or a var has a doc comment or a line comment of its own, or is declared in a
//     parenthesised group that has a doc comment;
//   - an exported field of an exported struct has a doc comment or a line comment, or shares
//     its line with a field that has one ("A, B int // ..."), or follows without a blank line
//     a field whose doc comment names it ("Total is ..., in Chunks chunks").
//
// A method that implements an interface needs no comment of its own: one named like a method
// of a standard interface (Error, Unwrap, String, MarshalJSON, ...), or like a documented
// method of an interface the package declares (event.Payload's EventType). go doc shows the
// interface's contract for it. Embedded fields and interfaces are not checked: their names are
// documented where declared. Fields are checked when fields is set.
func Undocumented(dir string, fields bool) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parseDir(fset, dir, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	if len(pkgs) != 1 {
		return nil, fmt.Errorf("apisurface: %s holds %d packages, want 1", dir, len(pkgs))
	}
	implemented := interfaceMethods(pkgs)
	var missing []string
	add := func(format string, args ...any) { missing = append(missing, fmt.Sprintf(format, args...)) }
	// named checks the doc comment of a type, func or method: full is how the report names
	// it (Recv.Name for a method), name what its comment must start with.
	named := func(what, full, name string, cg *ast.CommentGroup) {
		switch text := cg.Text(); {
		case strings.TrimSpace(text) == "":
			add("%s %s: no doc comment", what, full)
		case !startsWith(text, name):
			add("%s %s: the doc comment does not start with %q", what, full, name)
		}
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						named("func", d.Name.Name, d.Name.Name, d.Doc)
						continue
					}
					recv := receiverName(d.Recv.List[0].Type)
					if !ast.IsExported(recv) || (d.Doc == nil && implemented[d.Name.Name]) {
						continue
					}
					named("method", recv+"."+d.Name.Name, d.Name.Name, d.Doc)
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							doc := s.Doc
							if doc == nil && !d.Lparen.IsValid() {
								doc = d.Doc
							}
							named("type", s.Name.Name, s.Name.Name, doc)
							missing = append(missing, undocumentedMembers(fset, s, fields)...)
						case *ast.ValueSpec:
							if s.Doc != nil || s.Comment != nil || d.Doc != nil {
								continue
							}
							for _, n := range s.Names {
								if n.IsExported() {
									add("%s %s: no doc comment", d.Tok, n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(missing)
	return missing, nil
}

// undocumentedMembers returns the exported fields of struct type s, and the methods of
// interface type s, that lack a comment; struct fields only when fields is set. A field
// without a comment of its own is documented by the doc comment of the fields it follows
// without a blank line when that comment names it ("Total is ..., in Chunks chunks").
func undocumentedMembers(fset *token.FileSet, s *ast.TypeSpec, fields bool) []string {
	var missing []string
	switch u := s.Type.(type) {
	case *ast.StructType:
		if !fields {
			break
		}
		// group is the doc comment of the run of fields (no blank line between) f belongs to.
		group, prevEnd := "", 0
		for _, f := range u.Fields.List {
			line := fset.Position(f.Pos()).Line
			switch {
			case f.Doc != nil:
				group = f.Doc.Text()
			case line > prevEnd+1:
				group = ""
			}
			prevEnd = fset.Position(f.End()).Line
			if f.Doc != nil || f.Comment != nil {
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() && !mentions(group, n.Name) {
					missing = append(missing, fmt.Sprintf("field %s.%s: no doc comment", s.Name.Name, n.Name))
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range u.Methods.List {
			for _, n := range m.Names {
				if !n.IsExported() {
					continue
				}
				name := s.Name.Name + "." + n.Name
				switch text := m.Doc.Text(); {
				case strings.TrimSpace(text) == "" && m.Comment == nil:
					missing = append(missing, fmt.Sprintf("method %s: no doc comment", name))
				case text != "" && !startsWith(text, n.Name):
					missing = append(missing, fmt.Sprintf("method %s: the doc comment does not start with %q", name, n.Name))
				}
			}
		}
	}
	return missing
}

// startsWith reports whether doc's first word, after an optional article, is name.
func startsWith(doc, name string) bool {
	words := strings.Fields(doc)
	if len(words) > 1 && (words[0] == "A" || words[0] == "An" || words[0] == "The") {
		words = words[1:]
	}
	if len(words) == 0 {
		return false
	}
	w := strings.TrimRight(words[0], ".,:;")
	return w == name || strings.TrimSuffix(w, "'s") == name
}

// receiverName returns the name of a receiver's type: T for T, *T, T[P] and *T[P].
func receiverName(x ast.Expr) string {
	for {
		switch t := x.(type) {
		case *ast.StarExpr:
			x = t.X
		case *ast.IndexExpr:
			x = t.X
		case *ast.IndexListExpr:
			x = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// pkgFiles are the parsed non-test files of a package.
type pkgFiles struct {
	Files []*ast.File
}

// parseDir parses the non-test .go files of dir, in name order, by package name.
func parseDir(fset *token.FileSet, dir string, mode parser.Mode) (map[string]*pkgFiles, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pkgs := map[string]*pkgFiles{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, mode)
		if err != nil {
			return nil, err
		}
		p := pkgs[f.Name.Name]
		if p == nil {
			p = &pkgFiles{}
			pkgs[f.Name.Name] = p
		}
		p.Files = append(p.Files, f)
	}
	return pkgs, nil
}

// standardMethods are the methods of the standard library's common interfaces (error, errors'
// Unwrap/Is/As, fmt.Stringer, fmt.Formatter, encoding's marshalers).
var standardMethods = []string{"Error", "Unwrap", "Is", "As", "String", "GoString", "Format",
	"MarshalJSON", "UnmarshalJSON", "MarshalText", "UnmarshalText", "MarshalBinary", "UnmarshalBinary"}

// interfaceMethods returns the names a method may have to need no comment of its own: the
// standard ones, and those of the documented methods of the exported interfaces in pkgs.
func interfaceMethods(pkgs map[string]*pkgFiles) map[string]bool {
	names := map[string]bool{}
	for _, n := range standardMethods {
		names[n] = true
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok || !ts.Name.IsExported() {
					return true
				}
				if it, ok := ts.Type.(*ast.InterfaceType); ok {
					for _, m := range it.Methods.List {
						if m.Doc == nil && m.Comment == nil {
							continue
						}
						for _, n := range m.Names {
							names[n.Name] = true
						}
					}
				}
				return false
			})
		}
	}
	return names
}

// mentions reports whether text holds name as a word.
func mentions(text, name string) bool {
	for _, w := range strings.FieldsFunc(text, func(r rune) bool {
		return !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		if w == name {
			return true
		}
	}
	return false
}

// Test fails t when a name of the package in the working directory (pkg, as the messages name
// it: "pkg/flow") lacks a doc comment (Undocumented, fields included), or when its surface
// differs from api.txt (Check), which it rewrites instead with rewrite.
func Test(t testing.TB, pkg string, rewrite bool) {
	t.Helper()
	undocumented, err := Undocumented(".", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(undocumented) > 0 {
		t.Errorf("%d exported names of %s lack a doc comment that starts with the name:\n  %s",
			len(undocumented), pkg, strings.Join(undocumented, "\n  "))
	}
	msg, err := Check(".", "api.txt", rewrite)
	if err != nil {
		t.Fatal(err)
	}
	if msg != "" {
		t.Fatalf("the exported surface of %s differs from api.txt (- api.txt only, + the package only):\n%s"+
			"run `go test ./%s -run TestAPI -rewrite` if the change is deliberate, and review the diff", pkg, msg, pkg)
	}
}
