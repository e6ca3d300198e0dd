package metrics_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestSeamPackagesDoNotImportPrometheus: scheduler and worker (their
// non-test files) depend on Prometheus neither directly nor through another
// package; they report through their Metrics seams, and only this package
// and cmd/gpuq import client_golang.
func TestSeamPackagesDoNotImportPrometheus(t *testing.T) {
	t.Parallel()
	ctx := build.Default
	for _, root := range []string{"../../scheduler", "../../worker"} {
		seen := map[string]bool{}
		var visit func(path, dir, from string)
		visit = func(path, dir, from string) {
			if seen[path] || path == "C" || path == "unsafe" {
				return
			}
			seen[path] = true
			if strings.Contains(path, "prometheus") {
				t.Errorf("%s depends on %s (imported by %s)", root, path, from)
				return
			}
			pkg, err := ctx.Import(path, dir, 0)
			if err != nil {
				t.Fatalf("import %s (from %s): %v", path, from, err)
			}
			if pkg.Goroot {
				return
			}
			for _, imp := range pkg.Imports {
				visit(imp, pkg.Dir, path)
			}
		}
		pkg, err := ctx.ImportDir(root, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pkg.Imports) == 0 {
			t.Fatalf("found no imports in %s", root)
		}
		for _, imp := range pkg.Imports {
			visit(imp, pkg.Dir, root)
		}
	}
}
