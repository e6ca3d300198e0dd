package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// A job array is expanded here, by the client: one submission per task,
// each with its own id (<array id>-<index>, see [ArrayTaskID]), its own
// reservation and its own answer, and with the array's id and the task's
// index in the job record ([ledger.Job.ArrayID], [ledger.Job.ArrayIndex]),
// which the worker passes to the task as GPUQ_ARRAY_ID and
// GPUQ_ARRAY_INDEX. The ledger knows no array as a whole: the tasks are
// listed ([JobFilter.ArrayID]) and cancelled ([Client.CancelArray]) by
// their shared array id. A retried [Client.SubmitArray] is safe: each task
// id is the idempotency key of its task.

// ErrBadArray is wrapped by the errors of [ParseArray] and [ArrayTaskID].
var ErrBadArray = errors.New("bad job array")

// ParseArray reads an array's indexes: a comma-separated list of indexes
// and inclusive ranges ("0-99", "1,3,5-7"), each index in [0,
// ledger.MaxArrayIndex], at most ledger.MaxArrayTasks of them, none listed
// twice. It returns them in ascending order.
func ParseArray(spec string) ([]int, error) {
	bad := func(format string, args ...any) ([]int, error) {
		return nil, fmt.Errorf("array %q: %s: %w", spec, fmt.Sprintf(format, args...), ErrBadArray)
	}
	if spec == "" {
		return bad("empty; want indexes and ranges such as 0-99 or 1,3,5-7")
	}
	seen := map[int]bool{}
	var out []int
	for _, part := range strings.Split(spec, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := arrayIndex(lo)
		if err != nil {
			return bad("%q: %v", part, err)
		}
		last := first
		if isRange {
			if last, err = arrayIndex(hi); err != nil {
				return bad("%q: %v", part, err)
			}
			if last < first {
				return bad("range %q ends before it starts", part)
			}
		}
		if last-first+1 > ledger.MaxArrayTasks-len(out) {
			return bad("more than %d tasks", ledger.MaxArrayTasks)
		}
		for i := first; i <= last; i++ {
			if seen[i] {
				return bad("index %d is listed twice", i)
			}
			seen[i] = true
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out, nil
}

// arrayIndex reads one index: decimal digits, at most ledger.MaxArrayIndex.
func arrayIndex(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("want an index (0 to %d) or a range of them (0-99)", ledger.MaxArrayIndex)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > ledger.MaxArrayIndex {
		return 0, fmt.Errorf("index %s is more than %d", s, ledger.MaxArrayIndex)
	}
	return n, nil
}

// ArrayTaskID returns the job id of task index of array id: "<id>-<index>".
// It fails if id is not a valid token or the task id would be longer than
// an id may be ([ledger.MaxIDBytes]).
func ArrayTaskID(id string, index int) (string, error) {
	if err := subjects.CheckToken("array id", id); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadArray, err)
	}
	task := id + "-" + strconv.Itoa(index)
	if len(task) > ledger.MaxIDBytes {
		return "", fmt.Errorf("array id %s: task id %s is %d bytes, more than %d; use a shorter array id: %w",
			id, task, len(task), ledger.MaxIDBytes, ErrBadArray)
	}
	return task, nil
}

// ArrayTask is the outcome of one task of [Client.SubmitArray] or
// [Client.CancelArray].
type ArrayTask struct {
	Index int
	ID    string
	// Event is the scheduler's answer; zero when there was none (Err then
	// says why).
	Event wire.JobEvent
	// Err is nil when the task was accepted (or, for a cancel, cancelled or
	// asked to stop); a *RejectedError when it was refused, another error
	// when it could not be sent or answered.
	Err error
}

// SubmitArray submits one task of template s per index, in index order:
// each with the id ArrayTaskID(s.ID, index), ArrayID s.ID and its index.
// It submits every task whatever became of the ones before (a task
// refused for credits does not stop the next, which may be cheaper), and
// returns each task's outcome; only an id it cannot form, or a template
// already in an array, fails the whole call before anything is sent. A
// done ctx leaves the tasks not yet sent with ctx's error.
func (c *Client) SubmitArray(ctx context.Context, s ledger.Submit, indexes []int) ([]ArrayTask, error) {
	if s.ArrayID != "" || s.ArrayIndex != 0 {
		return nil, fmt.Errorf("submit array %s: the template names array %s already: %w", s.ID, s.ArrayID, ErrBadArray)
	}
	if len(indexes) > ledger.MaxArrayTasks {
		return nil, fmt.Errorf("submit array %s: %d tasks, more than %d: %w", s.ID, len(indexes), ledger.MaxArrayTasks, ErrBadArray)
	}
	out := make([]ArrayTask, len(indexes))
	for i, index := range indexes {
		id, err := ArrayTaskID(s.ID, index)
		if err != nil {
			return nil, fmt.Errorf("submit array: %w", err)
		}
		out[i] = ArrayTask{Index: index, ID: id}
	}
	for i := range out {
		if err := ctx.Err(); err != nil {
			out[i].Err = err
			continue
		}
		task := s
		task.ID, task.ArrayID, task.ArrayIndex = out[i].ID, s.ID, out[i].Index
		out[i].Event, out[i].Err = c.Submit(ctx, task)
	}
	return out, nil
}

// ArrayTasks lists the tasks of array id of account ("" for any account,
// which needs the rights to read every job) that the ledger holds (not
// archived ones), in index order.
func (c *Client) ArrayTasks(ctx context.Context, account, id string) ([]Listed, error) {
	if err := subjects.CheckToken("array id", id); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadArray, err)
	}
	page, err := c.Jobs(ctx, JobFilter{Account: account, ArrayID: id})
	if err != nil {
		return nil, err
	}
	tasks := page.Jobs
	slices.SortFunc(tasks, func(a, b Listed) int { return a.ArrayIndex() - b.ArrayIndex() })
	return tasks, nil
}

// CancelArray cancels every task of array id of account ("" for any
// account) that has not ended, one cancel per task, through its own
// account, and returns each one's outcome in index order. Tasks that have
// ended are left out. It fails as a whole only when the tasks cannot be
// listed, or the array has none.
func (c *Client) CancelArray(ctx context.Context, account, id string) ([]ArrayTask, error) {
	tasks, err := c.ArrayTasks(ctx, account, id)
	if err != nil {
		return nil, fmt.Errorf("cancel array %s: %w", id, err)
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("cancel array %s: %w", id, ErrNotFound)
	}
	var out []ArrayTask
	for _, t := range tasks {
		if t.State.Terminal() {
			continue
		}
		r := ArrayTask{Index: t.ArrayIndex(), ID: t.ID}
		if r.Err = ctx.Err(); r.Err == nil {
			r.Event, r.Err = c.Cancel(ctx, t.Account, t.ID)
		}
		out = append(out, r)
	}
	return out, nil
}
