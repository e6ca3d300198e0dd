package ledger

import (
	"encoding/json"
	"time"
)

// JobRecord is a [Job] as it is encoded, in storage and on the wire: every
// field in the struct itself, in the order of its JSON. A struct that adds
// fields to a job's JSON embeds a JobRecord ([Job.Record]); one that embeds
// a Job takes its MarshalJSON and adds nothing.
type JobRecord struct {
	ID                string            `json:"id"`
	Account           string            `json:"account"`
	Priority          int               `json:"priority"`
	GPUs              int               `json:"gpus"`
	Cost              Credits           `json:"cost"`
	Command           []string          `json:"command"`
	Env               map[string]string `json:"env,omitempty"`
	Walltime          time.Duration     `json:"walltime"`
	MaxAttempts       int               `json:"max_attempts"`
	Metered           bool              `json:"metered,omitempty"`
	Hold              bool              `json:"hold,omitempty"`
	Name              string            `json:"name,omitempty"`
	GPUModel          string            `json:"gpu_model,omitempty"`
	Workdir           string            `json:"workdir,omitempty"`
	ArrayID           string            `json:"array_id,omitempty"`
	ArrayIndex        int               `json:"array_index,omitempty"`
	After             []string          `json:"after,omitempty"`
	AfterAny          []string          `json:"after_any,omitempty"`
	WaitingOn         []string          `json:"waiting_on,omitempty"`
	Paused            bool              `json:"paused,omitempty"`
	SubmittedPriority *int              `json:"submitted_priority,omitempty"`
	State             JobState          `json:"state"`
	Attempt           int               `json:"attempt"`
	Failures          int               `json:"failures"`
	BusyRefusals      int               `json:"busy_refusals,omitempty"`
	Host              string            `json:"host,omitempty"`
	Devices           []string          `json:"devices,omitempty"`
	CancelRequested   bool              `json:"cancel_requested,omitempty"`
	Model             string            `json:"model,omitempty"`
	Reserved          Credits           `json:"reserved"`
	Charged           Credits           `json:"charged"`
	ExitCode          *int              `json:"exit_code,omitempty"`
	RuntimeMS         int64             `json:"runtime_ms,omitempty"`
	Reason            Reason            `json:"reason,omitempty"`
	Message           string            `json:"message,omitempty"`
	Attempts          []Attempt         `json:"attempts,omitempty"`
	SubmitSeq         uint64            `json:"submit_seq"`
	SubmittedAt       time.Time         `json:"submitted_at"`
	DispatchedAt      time.Time         `json:"dispatched_at,omitzero"`
	StartedAt         time.Time         `json:"started_at,omitzero"`
	EndedAt           time.Time         `json:"ended_at,omitzero"`
	Seq               uint64            `json:"seq"`
}

// Record returns j flattened, sharing its slices, maps and pointers.
func (j *Job) Record() JobRecord {
	o, r := j.opts(), j.out()
	return JobRecord{
		ID: j.ID, Account: j.Account, Priority: j.Priority, GPUs: j.GPUs, Cost: j.Cost, Command: j.Command,
		Env: o.Env, Walltime: j.Walltime, MaxAttempts: j.MaxAttempts, Metered: j.Metered, Hold: j.Hold,
		Name: o.Name, GPUModel: o.GPUModel, Workdir: o.Workdir, ArrayID: o.ArrayID, ArrayIndex: o.ArrayIndex,
		After: o.After, AfterAny: o.AfterAny, WaitingOn: o.WaitingOn, Paused: j.Paused,
		SubmittedPriority: o.SubmittedPriority, State: j.State, Attempt: j.Attempt, Failures: j.Failures,
		BusyRefusals: j.BusyRefusals, Host: r.Host, Devices: r.Devices, CancelRequested: j.CancelRequested,
		Model: r.Model, Reserved: j.Reserved, Charged: j.Charged, ExitCode: r.ExitCode, RuntimeMS: r.RuntimeMS,
		Reason: r.Reason, Message: r.Message, Attempts: r.Attempts, SubmitSeq: j.SubmitSeq,
		SubmittedAt: j.SubmittedAt, DispatchedAt: r.DispatchedAt, StartedAt: r.StartedAt, EndedAt: r.EndedAt,
		Seq: j.Seq,
	}
}

// Job returns the job r records, sharing its slices, maps and pointers. Its
// options and outcome are nil while all of them are zero.
func (r *JobRecord) Job() *Job {
	j := &Job{}
	r.to(j)
	return j
}

func (r *JobRecord) to(j *Job) {
	*j = Job{
		ID: r.ID, Account: r.Account, Priority: r.Priority, GPUs: r.GPUs, Cost: r.Cost, Command: r.Command,
		Walltime: r.Walltime, MaxAttempts: r.MaxAttempts, Metered: r.Metered, Hold: r.Hold, Paused: r.Paused,
		CancelRequested: r.CancelRequested, State: r.State, Attempt: r.Attempt, Failures: r.Failures,
		BusyRefusals: r.BusyRefusals, Reserved: r.Reserved, Charged: r.Charged, SubmitSeq: r.SubmitSeq,
		SubmittedAt: r.SubmittedAt, Seq: r.Seq,
	}
	o := JobOptions{Env: r.Env, Name: r.Name, GPUModel: r.GPUModel, Workdir: r.Workdir, ArrayID: r.ArrayID,
		ArrayIndex: r.ArrayIndex, After: r.After, AfterAny: r.AfterAny, WaitingOn: r.WaitingOn,
		SubmittedPriority: r.SubmittedPriority}
	if !o.zero() {
		j.JobOptions = new(JobOptions) // not &o, which would put every o on the heap
		*j.JobOptions = o
	}
	out := JobOutcome{Host: r.Host, Devices: r.Devices, Model: r.Model, ExitCode: r.ExitCode,
		RuntimeMS: r.RuntimeMS, Reason: r.Reason, Message: r.Message, Attempts: r.Attempts,
		DispatchedAt: r.DispatchedAt, StartedAt: r.StartedAt, EndedAt: r.EndedAt}
	if !out.zero() {
		j.JobOutcome = new(JobOutcome)
		*j.JobOutcome = out
	}
}

// zero reports whether o holds nothing. A non-nil empty slice or map is
// something: it encodes as such where the field has no omitempty.
func (o *JobOptions) zero() bool {
	return o.Env == nil && o.Name == "" && o.GPUModel == "" && o.Workdir == "" && o.ArrayID == "" &&
		o.ArrayIndex == 0 && o.After == nil && o.AfterAny == nil && o.WaitingOn == nil && o.SubmittedPriority == nil
}

func (o *JobOutcome) zero() bool {
	return o.Host == "" && o.Devices == nil && o.Model == "" && o.ExitCode == nil && o.RuntimeMS == 0 &&
		o.Reason == "" && o.Message == "" && o.Attempts == nil && o.DispatchedAt == (time.Time{}) &&
		o.StartedAt == (time.Time{}) && o.EndedAt == (time.Time{})
}

// MarshalJSON encodes j as its [JobRecord].
func (j Job) MarshalJSON() ([]byte, error) {
	return appendJob(nil, &j)
}

// UnmarshalJSON decodes a [JobRecord] into j.
func (j *Job) UnmarshalJSON(data []byte) error {
	return decodeJob(data, j)
}

// marshalJobRecord and unmarshalJobRecord are the encoding/json way, which
// the codec of job_codec.go must match byte for byte.
func marshalJobRecord(j *Job) ([]byte, error) {
	r := j.Record()
	return json.Marshal(&r)
}

func unmarshalJobRecord(data []byte, j *Job) error {
	var r JobRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	r.to(j)
	return nil
}
