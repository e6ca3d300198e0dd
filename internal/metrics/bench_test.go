package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/scheduler"
)

// BenchmarkFoldedAndCredits is what metrics add to the fold of a submit: one
// folded command and its reservation.
func BenchmarkFoldedAndCredits(b *testing.B) {
	s, err := NewScheduler(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s.Folded("submit", scheduler.FoldApplied, 3*time.Microsecond)
		s.Credits("vision", scheduler.CreditsReserved, 120)
	}
}
