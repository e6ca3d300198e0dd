package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print gpuq's version: module version, Go version and the commit it was built from",
		usage:   "version",
		example: `  gpuq version
  gpuq version --output json`,
		run: runVersion,
	})
}

// versionInfo is what the binary knows about its own build.
type versionInfo struct {
	Module   string `json:"module"`
	Version  string `json:"version"` // "(devel)" for a build from a checkout
	Go       string `json:"go"`
	Revision string `json:"revision,omitempty"` // the VCS commit, if the build recorded it
	Time     string `json:"time,omitempty"`     // the commit's time
	Modified bool   `json:"modified,omitempty"` // the checkout had uncommitted changes
}

// buildVersion reads the binary's build information.
func buildVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return versionInfo{Module: "github.com/gpuq/gpuq", Version: "unknown"}
	}
	v := versionInfo{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func runVersion(_ context.Context, e *env, args []string) error {
	c := find("version")
	fs := e.flags(c)
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	v := buildVersion()
	if e.output == "json" {
		return printJSON(e.stdout, v)
	}
	fmt.Fprintf(e.stdout, "gpuq %s (%s, %s)", v.Version, v.Module, v.Go)
	if v.Revision != "" {
		fmt.Fprintf(e.stdout, " commit %s", v.Revision)
		if v.Time != "" {
			fmt.Fprintf(e.stdout, " of %s", v.Time)
		}
		if v.Modified {
			fmt.Fprint(e.stdout, ", with uncommitted changes")
		}
	}
	fmt.Fprintln(e.stdout)
	return nil
}
