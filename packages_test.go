package gpuq_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestReadmePackageTable holds README's package table to the module: every
// package go list finds has a row, every row names a package, and what a
// package imports from the module (outside its tests) is among the packages
// its row says it depends on.
func TestReadmePackageTable(t *testing.T) {
	t.Parallel()
	rows := readmePackages(t)
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/gpuq/gpuq"
	dec := json.NewDecoder(bytes.NewReader(out))
	listed := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if name == "" {
			name = "."
		}
		listed[name] = true
		deps, ok := rows[name]
		if !ok {
			t.Errorf("package %s has no row in README's package table", name)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			if !deps[dep] && !deps["all of the above"] {
				t.Errorf("package %s imports %s, which its README row (← %s) does not name", name, dep, strings.Join(slices.Sorted(maps.Keys(deps)), ", "))
			}
		}
	}
	for name := range rows {
		if !listed[name] {
			t.Errorf("README's package table has a row for %s, which go list does not find", name)
		}
	}
}

// readmePackages parses the code block under "## Packages": each row that
// starts a package gives its name and the names after "←" up to the
// description (two spaces or more), split at commas.
func readmePackages(t *testing.T) map[string]map[string]bool {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]map[string]bool{}
	in, block := false, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Packages":
			in = true
		case in && strings.HasPrefix(line, "```"):
			if block {
				return rows
			}
			block = true
		case in && block && line != "" && line[0] != ' ':
			name, rest, ok := strings.Cut(line, "←")
			if !ok {
				t.Fatalf("README package row %q has no ←", line)
			}
			name = strings.TrimSpace(name)
			deps := map[string]bool{}
			spec, _, _ := strings.Cut(strings.TrimSpace(rest), "  ")
			for _, d := range strings.Split(spec, ",") {
				deps[strings.TrimSpace(d)] = true
			}
			rows[name] = deps
		}
	}
	t.Fatal("README has no package table under ## Packages")
	return nil
}
