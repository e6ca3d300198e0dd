// Determinism of the simulations. Goal: -sim.seed=N replays a run exactly,
// so a failure seen once can be replayed and shrunk. Method: run each
// simulation workload twice on one seed (the flag's, or one drawn per run
// and printed on failure) and compare the full traces: every command
// applied, in order, with its sequence and time. Two traces differ as soon
// as a map order, the wall clock or a global random source reaches an
// event. The workloads are the ones the TestSim… tests run, shortened so
// that the pair runs in about a second under -race.
package scheduler_test

import (
	"testing"
	"time"
)

func TestDeterminismSimReplay(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, seed uint64) []string
	}{
		{"fair_share", func(t *testing.T, seed uint64) []string { return fairShareRun(t, seed, 4*time.Hour).trace }},
		{"caps_and_liveness", func(t *testing.T, seed uint64) []string { return capsRun(t, seed).trace }},
		{"workers_that_free_late", func(t *testing.T, seed uint64) []string {
			s, _ := lateWorkersRun(t, seed, 2*time.Hour)
			return s.trace
		}},
		{"long_run", func(t *testing.T, seed uint64) []string { return longRunFor(t, seed, 3).trace }},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			first, second := sc.run(t, sd), sc.run(t, sd)
			if len(first) < 100 {
				t.Fatalf("seed %d: the run applied only %d commands: too little to compare", sd, len(first))
			}
			for i := range min(len(first), len(second)) {
				if first[i] != second[i] {
					t.Fatalf("seed %d: the runs part at command %d of %d/%d:\n first  %s\n second %s",
						sd, i, len(first), len(second), first[i], second[i])
				}
			}
			if len(first) != len(second) {
				t.Fatalf("seed %d: the first run applied %d commands, the second %d", sd, len(first), len(second))
			}
		})
	}
}
