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
	"io/fs"
	"os"
	"slices"
	"strings"
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
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
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
		for _, f := range p.Files {
			files = append(files, f)
		}
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
