// Command apicount prints the number of exported identifiers of each library package
// and their total: exported top-level functions, types, constants and variables, and
// exported methods of exported types. Test files, main packages, examples, e2e,
// internal packages and commands are not the library's API and are not counted.
//
//	go run ./scripts/apicount
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	counts := map[string]int{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && skipDir(path) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		n, lib, err := countFile(path)
		if err != nil {
			return err
		}
		if lib {
			counts[filepath.Dir(path)] += n
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(counts))
	for d := range counts {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	total := 0
	for _, d := range dirs {
		fmt.Printf("%-32s %4d\n", d, counts[d])
		total += counts[d]
	}
	fmt.Printf("%-32s %4d\n", "total", total)
}

func skipDir(path string) bool {
	base := filepath.Base(path)
	switch {
	case strings.HasPrefix(base, ".") || base == "testdata" || base == "internal":
		return true
	case path == "cmd" || path == "examples" || path == "e2e" || path == "scripts":
		return true
	}
	return false
}

// countFile counts the exported identifiers of one file; lib is false for a main package.
func countFile(path string) (n int, lib bool, err error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return 0, false, err
	}
	if f.Name.Name == "main" {
		return 0, false, nil
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || exportedRecv(d.Recv.List[0].Type) {
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n, true, nil
}

func exportedRecv(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
