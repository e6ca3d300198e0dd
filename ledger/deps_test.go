package ledger_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestImportsOnlyStandardLibrary fails if the ledger package (its non-test
// files) imports anything outside the standard library, directly or not: the
// ledger must stay a pure, deterministic core with no NATS, NVML or clock.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	t.Parallel()
	ctx := build.Default
	ctx.CgoEnabled = false
	seen := map[string]bool{}
	var visit func(path, dir string, from string)
	visit = func(path, dir, from string) {
		if seen[path] || path == "C" || path == "unsafe" {
			return
		}
		seen[path] = true
		pkg, err := ctx.Import(path, dir, 0)
		if err != nil {
			t.Fatalf("import %s (from %s): %v", path, from, err)
		}
		if !pkg.Goroot {
			t.Errorf("ledger depends on %s (imported by %s), which is not in the standard library", path, from)
			return
		}
		for _, imp := range pkg.Imports {
			if !strings.HasPrefix(imp, "vendor/") && !strings.HasPrefix(imp, "internal/") {
				visit(imp, pkg.Dir, path)
			}
		}
	}
	pkg, err := ctx.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("found no imports in the ledger package; is the test running in its directory?")
	}
	for _, imp := range pkg.Imports {
		visit(imp, pkg.Dir, "ledger")
	}
}
