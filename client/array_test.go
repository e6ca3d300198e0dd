package client_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
)

func TestParseArray(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string][]int{
		"0-3":        {0, 1, 2, 3},
		"1,3,5-7":    {1, 3, 5, 6, 7},
		"7,0":        {0, 7},
		"999999":     {ledger.MaxArrayIndex},
		"0-999":      nil, // checked by length below
		"000-002,10": {0, 1, 2, 10},
	} {
		got, err := client.ParseArray(spec)
		if err != nil {
			t.Errorf("ParseArray(%q): %v", spec, err)
			continue
		}
		if want != nil && !slices.Equal(got, want) {
			t.Errorf("ParseArray(%q) = %v, want %v", spec, got, want)
		}
	}
	if got, _ := client.ParseArray("0-999"); len(got) != ledger.MaxArrayTasks {
		t.Errorf("0-999 gave %d tasks, want %d", len(got), ledger.MaxArrayTasks)
	}
	for spec, says := range map[string]string{
		"":               "empty",
		"0-1000":         "more than 1000 tasks",
		"0-500,501-1000": "more than 1000 tasks",
		"5-3":            "ends before it starts",
		"1,1":            "listed twice",
		"0-3,2":          "listed twice",
		"-1":             "want an index",
		"a-b":            "want an index",
		"1,,2":           "want an index",
		"1000000":        "more than 999999",
		"0-9:2":          "want an index",
		" 1":             "want an index",
	} {
		_, err := client.ParseArray(spec)
		if !errors.Is(err, client.ErrBadArray) || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseArray(%q) = %v; want ErrBadArray saying %q", spec, err, says)
		}
	}
}

func TestArrayTaskID(t *testing.T) {
	t.Parallel()
	if id, err := client.ArrayTaskID("sweep", 7); err != nil || id != "sweep-7" {
		t.Errorf("ArrayTaskID(sweep, 7) = %q, %v", id, err)
	}
	long := strings.Repeat("a", ledger.MaxIDBytes-2)
	if _, err := client.ArrayTaskID(long, 7); err != nil {
		t.Errorf("a task id of %d bytes: %v", ledger.MaxIDBytes, err)
	}
	if _, err := client.ArrayTaskID(long, 10); !errors.Is(err, client.ErrBadArray) || !strings.Contains(err.Error(), "more than 64") {
		t.Errorf("a task id of %d bytes: %v; want ErrBadArray", ledger.MaxIDBytes+1, err)
	}
	if _, err := client.ArrayTaskID("a.b", 1); !errors.Is(err, client.ErrBadArray) {
		t.Errorf("an array id with a dot: %v; want ErrBadArray", err)
	}
}
