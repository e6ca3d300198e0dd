package subjects_test

import (
	"regexp"
	"testing"

	"github.com/gpuq/gpuq/subjects"
)

// StandbyKey keeps a token name readable, hashes any other name into a
// valid KV key, and never maps two names of this table to one key.
func TestStandbyKey(t *testing.T) {
	t.Parallel()
	kvKey := regexp.MustCompile(`^sched\.standby\.[A-Za-z0-9_-]{1,64}$`)
	seen := map[string]string{}
	for _, c := range []struct{ name, want string }{
		{"sched-1", "sched.standby.sched-1"},
		{"host.example.com", ""},
		{"host example", ""},
		{"x", "sched.standby.x"},
	} {
		got := subjects.StandbyKey(c.name)
		if c.want != "" && got != c.want || !kvKey.MatchString(got) || !subjects.Match(subjects.StandbyKeys, got) {
			t.Errorf("StandbyKey(%q) = %q, want %q", c.name, got, c.want)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("StandbyKey(%q) = StandbyKey(%q) = %q", c.name, other, got)
		}
		seen[got] = c.name
	}
}
