// Command doclen fails when a declaration's doc comment in library or command code
// is over 15 lines: a method's doc says what it does, what differs and its errors in
// a few lines; the story goes in the package doc, mechanism in docs/design.md.
// Package docs, test files, examples, e2e and internal/tests are not checked.
//
//	go run ./scripts/doclen [-max N] [DIR...]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	maxLines := flag.Int("max", 15, "longest doc comment allowed, in lines")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	n := 0
	for _, dir := range dirs {
		long, err := check(dir, *maxLines)
		if err != nil {
			fmt.Fprintln(os.Stderr, "doclen:", err)
			os.Exit(2)
		}
		for _, l := range long {
			fmt.Println(l)
		}
		n += len(long)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "doclen: %d doc comments over %d lines: say what differs in a few lines; the story in the package doc, mechanism in docs/design.md\n", n, *maxLines)
		os.Exit(1)
	}
}

// skipped reports whether the walk leaves out path, a directory.
func skipped(path string) bool {
	base := filepath.Base(path)
	if base != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "vendor") {
		return true
	}
	for _, p := range []string{"examples", "e2e", "internal/tests", "scripts"} {
		if path == p || strings.HasPrefix(path, p+string(filepath.Separator)) || strings.Contains(path, string(filepath.Separator)+p+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// check returns "file:line: name: N lines" for each long declaration doc under dir.
func check(dir string, maxLines int) ([]string, error) {
	var long []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipped(path) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		report := func(name string, doc *ast.CommentGroup) {
			if doc == nil {
				return
			}
			lines := fset.Position(doc.End()).Line - fset.Position(doc.Pos()).Line + 1
			if lines > maxLines {
				long = append(long, fmt.Sprintf("%s:%d: %s: %d lines", path, fset.Position(doc.Pos()).Line, name, lines))
			}
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				report(decl.Name.Name, decl.Doc)
			case *ast.GenDecl:
				name := decl.Tok.String() + " block"
				if !decl.Lparen.IsValid() && len(decl.Specs) == 1 {
					name = specName(decl.Specs[0])
				}
				report(name, decl.Doc)
				for _, spec := range decl.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						report(s.Name.Name, s.Doc)
						fieldDocs(s, report)
					case *ast.ValueSpec:
						report(s.Names[0].Name, s.Doc)
					}
				}
			}
		}
		return nil
	})
	return long, err
}

// fieldDocs reports the docs of a struct's fields and an interface's methods.
func fieldDocs(s *ast.TypeSpec, report func(string, *ast.CommentGroup)) {
	var fields *ast.FieldList
	switch t := s.Type.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	}
	if fields == nil {
		return
	}
	for _, f := range fields.List {
		name := s.Name.Name
		if len(f.Names) > 0 {
			name += "." + f.Names[0].Name
		}
		report(name, f.Doc)
	}
}

// specName is the name a type or value spec declares (its first).
func specName(spec ast.Spec) string {
	switch s := spec.(type) {
	case *ast.TypeSpec:
		return s.Name.Name
	case *ast.ValueSpec:
		return s.Names[0].Name
	}
	return "import"
}
