package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// notJSON are the commands that print no JSON: the daemons log instead,
// and completion prints a shell script (and refuses --output).
var notJSON = map[string]bool{"dev": true, "scheduler": true, "worker": true, "completion": true}

// mapKeys are the JSON keys whose value is a map keyed by data (model
// names, environment variables), not by field names.
var mapKeys = map[string]bool{"per_gpu_hour": true, "env": true}

var (
	snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	// durationKey names a duration; a count with its unit last
	// (runtime_ms) is a number, any other is a string.
	durationKey = regexp.MustCompile(`(^|_)(walltime|runtime|duration|ttl|age|waited|wait|timeout|interval|half_life|for|gpu_time)$`)
)

// checkJSONStyle fails t for each line of out that is not a JSON document,
// each key that is not snake_case, and each duration that is a number.
func checkJSONStyle(t *testing.T, what, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if out == "" {
		t.Errorf("%s printed nothing", what)
		return
	}
	for i, line := range lines {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			t.Errorf("%s: line %d is not one JSON document (%v): %.200s", what, i+1, err, line)
			continue
		}
		if strings.HasPrefix(what, "gpuq bench ") {
			v = unflatten(t, what, v)
		}
		walkJSON(t, what, "", v)
	}
}

// unflatten turns gpuq bench's flat object, keyed by dotted paths
// ("idle.start_ms_p50"), into the nested one it stands for, so that each
// name of a path is held to the style; a key that is not such a path
// fails.
func unflatten(t *testing.T, what string, v any) any {
	t.Helper()
	flat, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s: not an object", what)
		return v
	}
	out := map[string]any{}
	for k, x := range flat {
		parts := strings.Split(k, ".")
		m := out
		for _, p := range parts[:len(parts)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				if m[p] != nil {
					t.Errorf("%s: key %q is both a value and a path", what, p)
				}
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		last := parts[len(parts)-1]
		if _, isPath := m[last].(map[string]any); isPath {
			t.Errorf("%s: key %q is both a value and a path", what, k)
		}
		m[last] = x
	}
	return out
}

func walkJSON(t *testing.T, what, key string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if !mapKeys[key] && !snakeCase.MatchString(k) {
				t.Errorf("%s: key %q is not snake_case", what, k)
			}
			walkJSON(t, what, k, x)
		}
	case []any:
		for _, x := range v {
			walkJSON(t, what, key, x)
		}
	case json.Number:
		if durationKey.MatchString(key) {
			t.Errorf("%s: %s is the number %s, not a duration string", what, key, v)
		}
		if n, err := v.Int64(); err == nil && (n >= 1e9 || n <= -1e9) {
			t.Errorf("%s: %s is %s: nanoseconds?", what, key, v)
		}
	}
}

// TestJSONStyle runs every command that reports something with --output
// json and checks the one style: JSON lines, snake_case keys, durations as
// strings. A command added without a case here fails the test.
func TestJSONStyle(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--max-log-bytes", "64")
	runs := [][]string{
		{"prices", "set", "--default", "360", "--model", "NVIDIA H200 141GB HBM3e=720"},
		{"prices", "show"},
		{"account", "create", "js", "--balance", "100"},
		{"account", "grant", "js", "-10"},
		{"account", "limits", "js", "--max-jobs", "3"},
		{"account", "refill", "js", "--rate", "10", "--cap", "500"},
		{"account", "weight", "js", "2"},
		{"account", "show", "js"},
		{"account", "list"},
		{"submit", "--id", "w", "--account", "demo", "--cost", "1", "--walltime", "90m", "--wait", "--", "sh", "-c", "printf 'h\\351llo\\n'; head -c 100 /dev/zero"},
		{"submit", "--id", "m", "--account", "demo", "--walltime", "1m", "--", "sleep", "600"},
		{"submit", "--id", "f", "--account", "demo", "--cost", "1", "--wait", "--", "false"},
		{"retry", "f"},
		{"jobs"},
		{"job", "w"},
		{"logs", "w"},
		{"why", "m"},
		{"submit", "--id", "dep", "--account", "demo", "--cost", "1", "--after", "m", "--", "true"},
		{"submit", "--account", "demo", "--gpus", "2", "--walltime", "30m", "--dry-run", "--", "true"},
		{"hold", "dep"},
		{"update", "dep", "--priority", "5"},
		{"release", "dep"},
		{"cancel", "m"},
		{"hosts"},
		{"audit"},
		{"status"},
		{"usage"},
		{"usage", "--by", "job"},
		{"version"},
		{"bench", "--nats", d.url, "--jobs", "10", "--probes", "2", "--warmup", "0", "--js-ops", "100"},
	}
	covered := map[string]bool{}
	for _, args := range runs {
		covered[args[0]] = true
		what := "gpuq " + strings.Join(args, " ") + " --output json"
		r := d.gpuq(append([]string{args[0], "--output", "json"}, args[1:]...)...)
		if r.code != 0 && r.code != exitJobFailed {
			t.Errorf("%s: exit %d\n%s%s", what, r.code, r.stdout, r.stderr)
			continue
		}
		checkJSONStyle(t, what, r.stdout)
		if args[0] == "submit" && slicesContains(args, "--wait") && strings.Count(r.stdout, "\n") < 3 {
			t.Errorf("%s: want a line for each event, got:\n%s", what, r.stdout)
		}
	}
	for _, c := range commands {
		if !notJSON[c.name] && !covered[c.name] {
			t.Errorf("gpuq %s is not run with --output json here: add it to TestJSONStyle", c.name)
		}
	}
	// Output that is not UTF-8 is base64 and says so; the rest is text.
	out := d.ok("logs", "w", "--output", "json")
	var first struct{ Data, Encoding string }
	if err := json.NewDecoder(bytes.NewBufferString(out)).Decode(&first); err != nil || first.Encoding != "base64" {
		t.Errorf("logs of output that is not UTF-8: %+v, %v\n%s", first, err, out)
	}
	if !strings.Contains(out, `"data":"gpuq: exit 0`) || !strings.Contains(out, `"truncated":true,"dropped_bytes":42`) {
		t.Errorf("logs --output json:\n%s", out)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
