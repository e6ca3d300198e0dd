package worker

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeSaysWhatAJobSees holds README's table of what a job can and
// cannot see to the code: every variable a job inherits from the worker,
// and every one gpuq sets, is named there.
func TestReadmeSaysWhatAJobSees(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	start := strings.Index(readme, "| a job can | a job cannot |")
	if start < 0 {
		t.Fatal("README has no table of what a job can and cannot see")
	}
	table := readme[start:]
	table = table[:strings.Index(table, "\n\n")]
	names := append([]string{"LC_*", markerVar, "GPUQ_JOB_ID", "GPUQ_ACCOUNT", "GPUQ_ATTEMPT", "GPUQ_ARRAY_ID", "GPUQ_ARRAY_INDEX",
		"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}, allowedEnv...)
	for _, name := range names {
		if !strings.Contains(table, "`"+name+"`") {
			t.Errorf("README's table of what a job sees does not name `%s`", name)
		}
	}
}
