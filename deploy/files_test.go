package deploy_test

// Every file in deploy/ is exercised by a test: each is named by a string
// literal of some test file of the module's packages that use deploy/
// (this one, the root package, cmd/gpuq), by its path (relative to deploy/,
// or with deploy/ in front), by a glob pattern the test reads files with,
// or by its base name where no other file of deploy/ has it. A file added
// without a test fails here, named, and so does one deploy/README.md does
// not list.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestEveryDeployFileIsTested(t *testing.T) {
	var files []string
	bases := map[string]int{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}
		files = append(files, filepath.ToSlash(p))
		bases[path.Base(p)]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var lits []string
	for _, dir := range []string{".", "..", "../cmd/gpuq"} {
		tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range tests {
			lits = append(lits, stringLiterals(t, f)...)
		}
	}
	if len(lits) == 0 {
		t.Fatal("no string literals in any test file")
	}
	readme := readFile(t, "README.md")
	for _, f := range files {
		if !named(f, lits, bases[path.Base(f)] == 1) {
			t.Errorf("deploy/%s is named by no test: add a test that reads it (and a line in deploy/README.md)", f)
		}
		if !strings.Contains(readme, "`"+f+"`") {
			t.Errorf("deploy/README.md does not list deploy/%s", f)
		}
	}
}

// named reports whether a literal names file f (relative to deploy/).
func named(f string, lits []string, uniqueBase bool) bool {
	for _, l := range lits {
		switch {
		case l == f, l == "deploy/"+f, strings.HasSuffix(l, "/deploy/"+f):
			return true
		case uniqueBase && l == path.Base(f):
			return true
		case strings.ContainsAny(l, "*?["):
			if ok, err := path.Match(l, f); err == nil && ok {
				return true
			}
		}
	}
	return false
}

// stringLiterals returns every string literal of the Go file, unquoted.
func stringLiterals(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if b, ok := n.(*ast.BasicLit); ok && b.Kind == token.STRING {
			s, err := strconv.Unquote(b.Value)
			if err != nil {
				t.Fatalf("%s: literal %s: %v", file, b.Value, err)
			}
			out = append(out, s)
		}
		return true
	})
	return out
}
