package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// arrayTaskRow is one task of submit --array or cancel --array, as JSON.
type arrayTaskRow struct {
	Index   int              `json:"index"`
	ID      string           `json:"id"`
	Type    ledger.EventType `json:"type,omitempty"` // the answer's event type; empty with no answer
	Reason  ledger.Reason    `json:"reason,omitempty"`
	Message string           `json:"message,omitempty"`
	Error   string           `json:"error,omitempty"` // the task got no answer: why
}

// arrayOutcome is what submit --array and cancel --array print as JSON.
type arrayOutcome struct {
	ArrayID string         `json:"array_id"`
	Tasks   []arrayTaskRow `json:"tasks"`
	// Done counts tasks accepted (or cancelled), Failed the rest.
	Done   int `json:"done"`
	Failed int `json:"failed"`
}

// submitArray submits one task of template s per index of spec and says
// what became of each: a task refused (say, for credits) does not stop the
// others. It exits with exitRejected if any task was refused or not
// answered, after printing every task's outcome.
func submitArray(ctx context.Context, e *env, s ledger.Submit, spec string, wait bool) error {
	if wait {
		return usagef("--wait does not follow a job array; watch its tasks with gpuq jobs --array ID")
	}
	indexes, err := client.ParseArray(spec)
	if err != nil {
		return usagef("--array: %v", err)
	}
	for _, i := range []int{indexes[0], indexes[len(indexes)-1]} {
		if _, err := client.ArrayTaskID(s.ID, i); err != nil {
			return usagef("--array: %v", err)
		}
	}
	sess, err := e.session()
	if err != nil {
		return err
	}
	defer sess.close()
	tasks, err := sess.c.SubmitArray(ctx, s, indexes)
	if err != nil {
		return err
	}
	return reportArray(e, s.ID, "submit", tasks, func(ev wire.JobEvent) bool {
		return ev.Type == ledger.EventAccepted || ev.Type == ledger.EventHeld || ev.Type == ledger.EventIgnored
	})
}

// runCancelArray cancels every unfinished task of the array --array names,
// one cancel per task.
func runCancelArray(ctx context.Context, e *env, c *command, fs *flag.FlagSet, account, array *string, args []string) error {
	s, err := e.noArgs(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	tasks, err := s.c.CancelArray(ctx, *account, *array)
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("no job array %s (no task of it in the ledger)", *array)
	}
	if errors.Is(err, client.ErrBadArray) {
		return usagef("--array: %v", err)
	}
	if err != nil {
		return err
	}
	if len(tasks) == 0 && e.output != "json" {
		fmt.Fprintf(e.stdout, "every task of array %s has ended already; nothing to cancel\n", *array)
		return nil
	}
	// Ignored: the task was already being cancelled, or ended meanwhile;
	// a cancel --array run again is not a failure.
	return reportArray(e, *array, "cancel", tasks, func(ev wire.JobEvent) bool {
		return ev.Type == ledger.EventCancelled || ev.Type == ledger.EventCancelRequested || ev.Type == ledger.EventIgnored
	})
}

// reportArray prints each task's outcome and a summary line, and returns
// an exitError with exitRejected unless every task went as done says.
func reportArray(e *env, arrayID, verb string, tasks []client.ArrayTask, done func(wire.JobEvent) bool) error {
	out := arrayOutcome{ArrayID: arrayID, Tasks: make([]arrayTaskRow, 0, len(tasks))}
	var failures []string
	for _, t := range tasks {
		r := arrayTaskRow{Index: t.Index, ID: t.ID, Type: t.Event.Type, Reason: t.Event.Reason, Message: t.Event.Message}
		var rej *client.RejectedError
		switch {
		case t.Err == nil && done(t.Event):
			out.Done++
		case t.Err == nil || errors.As(t.Err, &rej):
			out.Failed++
			failures = append(failures, fmt.Sprintf("task %d (%s) %s: %s (%s)", t.Index, t.ID, t.Event.Type, t.Event.Message, t.Event.Reason))
		default:
			out.Failed++
			r.Error = t.Err.Error()
			failures = append(failures, fmt.Sprintf("task %d (%s): %v", t.Index, t.ID, t.Err))
		}
		out.Tasks = append(out.Tasks, r)
		if e.output != "json" {
			if r.Error != "" {
				fmt.Fprintf(e.stdout, "error %s: %s\n", t.ID, r.Error)
			} else {
				fmt.Fprintf(e.stdout, "%s %s: %s\n", r.Type, t.ID, r.Message)
			}
		}
	}
	if e.output == "json" {
		if err := printJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "array %s: %s %d of %d tasks\n", arrayID, pastTense(verb), out.Done, len(tasks))
	}
	if len(failures) > 0 {
		const shown = 10
		msg := strings.Join(failures[:min(len(failures), shown)], "; ")
		if len(failures) > shown {
			msg += fmt.Sprintf("; and %d more", len(failures)-shown)
		}
		return exitError{exitRejected, fmt.Errorf("array %s: %d of %d tasks not %s: %s", arrayID, len(failures), len(tasks), pastTense(verb), msg)}
	}
	return nil
}

func pastTense(verb string) string {
	if verb == "submit" {
		return "submitted"
	}
	return "cancelled"
}

// hasArrayFlag reports whether args give --array before any "--".
func hasArrayFlag(args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--array" || a == "-array" || strings.HasPrefix(a, "--array=") || strings.HasPrefix(a, "-array="):
			return true
		}
	}
	return false
}
