package deploy_test

// Tests of deploy/Containerfile without a container engine: every
// instruction is parsed and known, the build stage runs the cgo build of
// ./cmd/gpuq (and that very command, run here, builds a gpuq binary), the
// runtime stage is slim and runs the binary where the Kubernetes manifests
// and systemd units expect it, and the README's build command builds the
// image the manifests run.

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Containerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

// parseContainerfile parses the instructions of a Dockerfile/Containerfile,
// failing the test on one it does not know.
func parseContainerfile(t *testing.T, path string) []instruction {
	t.Helper()
	known := []string{"FROM", "RUN", "COPY", "ADD", "WORKDIR", "ENV", "ARG", "EXPOSE", "USER", "ENTRYPOINT", "CMD", "LABEL", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "ONBUILD"}
	var out []instruction
	lines := strings.Split(readFile(t, path), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		start := i + 1
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		cmd, args, _ := strings.Cut(line, " ")
		if !slices.Contains(known, strings.ToUpper(cmd)) || cmd != strings.ToUpper(cmd) {
			t.Fatalf("%s:%d: unknown instruction %q", path, start, cmd)
		}
		out = append(out, instruction{start, cmd, strings.Join(strings.Fields(args), " ")})
	}
	return out
}

func TestContainerfile(t *testing.T) {
	ins := parseContainerfile(t, "Containerfile")
	// Two stages: the build on the Go toolchain go.mod names, and a slim
	// runtime that copies only the binary out of it.
	var froms []instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			froms = append(froms, in)
		}
	}
	goVersion := regexp.MustCompile(`(?m)^go (1\.[0-9]+)`).FindStringSubmatch(readFile(t, "../go.mod"))
	if len(froms) != 2 || goVersion == nil || !regexp.MustCompile(`^golang:`+regexp.QuoteMeta(goVersion[1])+`[-.]\S* AS build$`).MatchString(froms[0].args) ||
		!strings.HasSuffix(strings.Fields(froms[1].args)[0], "-slim") {
		t.Fatalf("Containerfile stages %+v: want FROM golang:%s… AS build, then a -slim runtime", froms, goVersion)
	}
	stage := func(in instruction) int {
		n := -1
		for _, f := range froms {
			if f.line <= in.line {
				n++
			}
		}
		return n
	}
	var build, run []instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			continue
		}
		if stage(in) == 0 {
			build = append(build, in)
		} else {
			run = append(run, in)
		}
	}

	// The build step: cgo on (go-nvml), the package the README installs.
	var goBuild string
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	out := flagValue(strings.Fields(goBuild), "-o")
	if !strings.Contains(goBuild, "CGO_ENABLED=1") || !strings.HasSuffix(goBuild, " ./cmd/gpuq") || out == "" {
		t.Fatalf("Containerfile build step %q: want CGO_ENABLED=1 go build -o BIN ./cmd/gpuq", goBuild)
	}
	if !strings.Contains(readFile(t, "../README.md"), "go install ./cmd/gpuq") {
		t.Error("README.md no longer installs ./cmd/gpuq, which the Containerfile builds")
	}
	// Run the build step as it is written, from the repository root, into
	// a temporary directory instead of its output path.
	bin := filepath.Join(t.TempDir(), "gpuq")
	cmd := exec.Command("sh", "-c", strings.Replace(goBuild, "-o "+out, "-o "+bin, 1))
	cmd.Dir = ".."
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Containerfile's build step, run here: %v\n%s", err, o)
	}
	if o, err := exec.Command(bin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(o), "scheduler") {
		t.Errorf("the binary the build step makes: gpuq --help: %v\n%s", err, o)
	}

	// The runtime stage: the binary copied from the build to where the
	// manifests run it, its entrypoint, the metrics port, the NVIDIA
	// runtime told to give every GPU, a user other than root.
	want := map[string]string{
		"COPY":       "--from=build " + out + " " + installedBinary,
		"EXPOSE":     strings.TrimPrefix(metricsListen, ":"),
		"USER":       "65532:65532",
		"ENTRYPOINT": `["` + installedBinary + `"]`,
	}
	got := map[string]string{}
	for _, in := range run {
		got[in.cmd] = in.args
		if in.cmd == "ENTRYPOINT" || in.cmd == "CMD" {
			var argv []string
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
				t.Errorf("Containerfile:%d: %s is not in exec (JSON) form: %v", in.line, in.cmd, err)
			}
		}
		if in.cmd == "RUN" && regexp.MustCompile(`\bgo (build|install)\b`).MatchString(in.args) {
			t.Errorf("Containerfile:%d: the runtime stage builds Go", in.line)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Containerfile runtime stage: %s %q, want %q", k, got[k], v)
		}
	}
	if !strings.Contains(got["ENV"], "NVIDIA_VISIBLE_DEVICES=all") {
		t.Errorf("Containerfile runtime stage: ENV %q, want NVIDIA_VISIBLE_DEVICES=all", got["ENV"])
	}

	// The README's build command (and the Containerfile's header) builds
	// the image the manifests run.
	buildCmd := "docker build -f deploy/Containerfile -t " + image + " ."
	for _, f := range []string{"README.md", "../README.md", "Containerfile"} {
		if !strings.Contains(readFile(t, f), buildCmd) {
			t.Errorf("%s does not build the image with %q", f, buildCmd)
		}
	}
}
