package ledger

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"
)

// oldJob is Job as it was before its options and outcome moved behind
// pointers: the encoding a JobRecord must keep, byte for byte.
type oldJob struct {
	ID          string            `json:"id"`
	Account     string            `json:"account"`
	Priority    int               `json:"priority"`
	GPUs        int               `json:"gpus"`
	Cost        Credits           `json:"cost"` // reserved at submit
	Command     []string          `json:"command"`
	Env         map[string]string `json:"env,omitempty"`
	Walltime    time.Duration     `json:"walltime"`
	MaxAttempts int               `json:"max_attempts"`
	// Metered jobs reserve Cost = gpus × walltime × the highest price and
	// are charged for the runtime they use; see [Pricing].
	Metered bool `json:"metered,omitempty"`
	// Hold asks to wait, unreserved, when the account cannot pay yet,
	// instead of being rejected.
	Hold bool `json:"hold,omitempty"`
	// Name is the submitter's display name for the job, if any.
	Name string `json:"name,omitempty"`
	// GPUModel is the GPU model the job asks for; empty is any. The
	// scheduler places it only on hosts whose every GPU is that model.
	GPUModel string `json:"gpu_model,omitempty"`
	// Workdir is the job's working directory on its host; empty is the
	// attempt's own directory.
	Workdir string `json:"workdir,omitempty"`
	// ArrayID names the job array the job is task ArrayIndex of; empty
	// when it is no array's. An absent array_index is 0.
	ArrayID    string `json:"array_id,omitempty"`
	ArrayIndex int    `json:"array_index,omitempty"`
	// After and AfterAny are the jobs it was submitted to wait for (see
	// [Submit]); WaitingOn those of them that have not ended yet. A pending
	// job with WaitingOn is reserved but not dispatched.
	After     []string `json:"after,omitempty"`
	AfterAny  []string `json:"after_any,omitempty"`
	WaitingOn []string `json:"waiting_on,omitempty"`
	// Paused is a hold its owner put on the waiting job ([Modify]): it
	// keeps its reservation and place but is not dispatched until released.
	Paused bool `json:"paused,omitempty"`
	// SubmittedPriority is the priority it was submitted with, once an
	// update changed Priority; a resubmission is compared against it.
	SubmittedPriority *int `json:"submitted_priority,omitempty"`

	State JobState `json:"state"`
	// Attempt is the number of the current or last dispatch; 0 before the
	// first. Each dispatch decision names Attempt+1.
	Attempt int `json:"attempt"`
	// Failures counts attempts that ended lost, rejected by a worker or
	// ended by the infrastructure; the job fails when it reaches
	// MaxAttempts. A busy refusal counts here only past MaxBusyRefusals.
	Failures int `json:"failures"`
	// BusyRefusals counts attempts a worker refused only because the GPUs
	// it was sent to were taken ([Report.Busy]). They spend no attempt and
	// start no retry delay, up to [MaxBusyRefusals]; a busy refusal past
	// that counts in Failures as an ordinary worker rejection.
	BusyRefusals    int      `json:"busy_refusals,omitempty"`
	Host            string   `json:"host,omitempty"`
	Devices         []string `json:"devices,omitempty"`
	CancelRequested bool     `json:"cancel_requested,omitempty"`
	Model           string   `json:"model,omitempty"` // GPU model of the current attempt, as its worker reported

	Reserved Credits `json:"reserved"` // credits the job's reservation holds now (0 unless pending, dispatched or running)
	Charged  Credits `json:"charged"`  // credits charged at settlement

	ExitCode  *int   `json:"exit_code,omitempty"`
	RuntimeMS int64  `json:"runtime_ms,omitempty"`
	Reason    Reason `json:"reason,omitempty"` // why it was rejected, failed, cancelled or requeued
	Message   string `json:"message,omitempty"`

	Attempts []Attempt `json:"attempts,omitempty"` // every attempt that has ended

	// SubmitSeq is the log sequence of the accepted submission; it orders
	// jobs of equal priority by age.
	SubmitSeq    uint64    `json:"submit_seq"`
	SubmittedAt  time.Time `json:"submitted_at"`
	DispatchedAt time.Time `json:"dispatched_at,omitzero"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	EndedAt      time.Time `json:"ended_at,omitzero"`
	// Seq is the log sequence of the last command that changed the job.
	Seq uint64 `json:"seq"`
}

var tricky = []string{"", "a", "train.py", "<&>", "q\"uote", `back\slash`, "tab\there", "nl\n", "\x00", "\x7f",
	"é", "日本", "\u2028\u2029", "\xff", "a\xc3", "\xed\xa0\x80", "😀"}

func genString(t *rapid.T, label string) string {
	return rapid.OneOf(rapid.SampledFrom(tricky), rapid.String(), rapid.StringMatching(`[a-z0-9_.-]{0,12}`)).Draw(t, label)
}

func genStrings(t *rapid.T, label string) []string {
	switch rapid.IntRange(0, 3).Draw(t, label+"-kind") {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string { return genString(t, "s") }), 1, 4).Draw(t, label)
}

func genTime(t *rapid.T, label string) time.Time {
	switch rapid.IntRange(0, 5).Draw(t, label+"-kind") {
	case 0:
		return time.Time{}
	case 1:
		return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // encoding/json refuses it
	case 2:
		return time.Unix(rapid.Int64Range(0, 4e9).Draw(t, label), 0).In(time.FixedZone("x", 3600))
	}
	return time.Unix(rapid.Int64Range(-1e10, 1e11).Draw(t, label), rapid.Int64Range(0, 1e9-1).Draw(t, label+"-ns")).UTC()
}

func genInt(t *rapid.T, label string) int {
	return rapid.OneOf(rapid.IntRange(-3, 10), rapid.Int()).Draw(t, label)
}

func genIntPtr(t *rapid.T, label string) *int {
	if rapid.Bool().Draw(t, label+"-nil") {
		return nil
	}
	v := genInt(t, label)
	return &v
}

func genOldJob(t *rapid.T) oldJob {
	var env map[string]string
	if n := rapid.IntRange(-1, 3).Draw(t, "env"); n >= 0 {
		env = map[string]string{}
		for range n {
			env[genString(t, "env-k")] = genString(t, "env-v")
		}
	}
	var attempts []Attempt
	if rapid.IntRange(0, 3).Draw(t, "attempts") == 0 {
		attempts = []Attempt{{N: 1, Host: genString(t, "a-host"), GPUs: 1, Outcome: StatePending, Message: genString(t, "a-msg"),
			StartedAt: genTime(t, "a-start"), EndedAt: genTime(t, "a-end"), Charged: 3}}
	}
	return oldJob{
		ID: genString(t, "id"), Account: genString(t, "account"), Priority: genInt(t, "priority"), GPUs: genInt(t, "gpus"),
		Cost: Credits(genInt(t, "cost")), Command: genStrings(t, "command"), Env: env,
		Walltime: time.Duration(genInt(t, "walltime")), MaxAttempts: genInt(t, "max"), Metered: rapid.Bool().Draw(t, "metered"),
		Hold: rapid.Bool().Draw(t, "hold"), Name: genString(t, "name"), GPUModel: genString(t, "model"),
		Workdir: genString(t, "workdir"), ArrayID: genString(t, "array"), ArrayIndex: genInt(t, "index"),
		After: genStrings(t, "after"), AfterAny: genStrings(t, "after-any"), WaitingOn: genStrings(t, "waiting"),
		Paused: rapid.Bool().Draw(t, "paused"), SubmittedPriority: genIntPtr(t, "sprio"),
		State:   JobState(rapid.OneOf(rapid.SampledFrom([]string{"pending", "running", "held", "succeeded"}), rapid.String()).Draw(t, "state")),
		Attempt: genInt(t, "attempt"), Failures: genInt(t, "failures"), BusyRefusals: genInt(t, "busy"),
		Host: genString(t, "host"), Devices: genStrings(t, "devices"), CancelRequested: rapid.Bool().Draw(t, "cancel"),
		Model: genString(t, "gpu"), Reserved: Credits(genInt(t, "reserved")), Charged: Credits(genInt(t, "charged")),
		ExitCode: genIntPtr(t, "exit"), RuntimeMS: int64(genInt(t, "runtime")), Reason: Reason(genString(t, "reason")),
		Message: genString(t, "message"), Attempts: attempts, SubmitSeq: rapid.Uint64().Draw(t, "submit-seq"),
		SubmittedAt: genTime(t, "submitted"), DispatchedAt: genTime(t, "dispatched"), StartedAt: genTime(t, "started"),
		EndedAt: genTime(t, "ended"), Seq: rapid.Uint64().Draw(t, "seq"),
	}
}

// A job's encoding is the old flat struct's, byte for byte, by the codec
// and by its encoding/json fallback; both decode it back to the same job.
func TestJobCodecMatchesTheOldStruct(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		old := genOldJob(t)
		want, wantErr := json.Marshal(&old)
		rec := JobRecord(old)
		j := rec.Job()
		got, err := appendJob(nil, j)
		viaJSON, jsonErr := marshalJobRecord(j)
		if (err != nil) != (wantErr != nil) || (jsonErr != nil) != (wantErr != nil) {
			t.Fatalf("encode: codec %v, fallback %v, old struct %v", err, jsonErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		if !bytes.Equal(got, want) || !bytes.Equal(viaJSON, want) {
			t.Fatalf("encoded\n%s\nby the codec,\n%s\nby the fallback, want\n%s", got, viaJSON, want)
		}
		compareDecodings(t, want)
	})
}

// compareDecodings checks that data decodes by the codec as into the old
// struct with encoding/json: the same error or none, the same job.
func compareDecodings(t interface{ Fatalf(string, ...any) }, data []byte) {
	var old oldJob
	wantErr := json.Unmarshal(data, &old)
	var j Job
	err := decodeJob(data, &j)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decode %q: codec %v, old struct %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	if got, want := j.Record(), JobRecord(old); !reflect.DeepEqual(got, want) {
		t.Fatalf("decode %q:\n%+v\nwant\n%+v", data, got, want)
	}
	if (j.JobOptions != nil) == j.opts().zero() || (j.JobOutcome != nil) == j.out().zero() {
		t.Fatalf("decode %q: options %v, outcome %v: allocated exactly when not empty?", data, j.JobOptions, j.JobOutcome)
	}
	want, wantErr := json.Marshal(&old)
	got, err := appendJob(nil, &j)
	if (err != nil) != (wantErr != nil) || err == nil && !bytes.Equal(got, want) {
		t.Fatalf("re-encode %q: %s, %v; want %s, %v", data, got, err, want, wantErr)
	}
}

// The codec reads what encoding/json reads, and rejects what it rejects.
func FuzzJobCodec(f *testing.F) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 123, time.UTC)
	code := 2
	for _, j := range []oldJob{
		{ID: "j1", Account: "a", GPUs: 1, Cost: 5, Reserved: 5, Command: []string{"python", "train.py"}, Walltime: time.Hour,
			MaxAttempts: 3, State: StatePending, SubmitSeq: 1, SubmittedAt: at, Seq: 1},
		{ID: "j2", Account: "a", Command: []string{}, Env: map[string]string{"A": "1", "<": "&"}, Name: "n", After: []string{"j1"},
			WaitingOn: []string{"j1"}, State: StateFailed, Attempt: 2, Failures: 2, Host: "h", Devices: []string{"GPU-0"},
			ExitCode: &code, RuntimeMS: 10, Reason: "exit", Message: "m\n", Attempts: []Attempt{{N: 1, EndedAt: at}},
			SubmittedAt: at, DispatchedAt: at, StartedAt: at, EndedAt: at.Add(time.Second), Seq: 9},
	} {
		data, err := json.Marshal(&j)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{`{}`, `null`, ` {"id":"x"} `, `{"id":"x","id":"y"}`, `{"ID":"x"}`, `{"id":"\u00e9"}`,
		"{\"id\":\"\xff\"}", `{"id":"\ud800"}`, `{"gpus":1.5}`, `{"gpus":-0}`, `{"gpus":01}`, `{"gpus":- 1}`,
		`{"seq":-1}`, `{"seq":18446744073709551615}`, `{"seq":18446744073709551616}`, `{"held":5}`,
		`{"env":{"a":"1","a":"2"}}`, `{"command":null}`, `{"submitted_at":"2026-12-01T09:00:00+01:00"}`,
		`{"submitted_at":"2026-12-01"}`, `{"metered":true,"hold":false}`, `{"extra":[1,{"x":null}]}`, `{"id":"x"}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		compareDecodings(t, data)
	})
}

// The records the fold writes are read by the codec itself, not handed to
// encoding/json: a pending job's, and one that has run and ended.
func TestJobCodecReadsTheFoldsRecords(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	code := 0
	for _, j := range []*Job{
		{ID: "j1", Account: "a", GPUs: 1, Cost: 5, Reserved: 5, Command: []string{"python", "train.py"}, Walltime: time.Hour,
			MaxAttempts: 3, State: StatePending, SubmitSeq: 1, SubmittedAt: at, Seq: 1},
		{ID: "j2", Account: "a", GPUs: 1, Cost: 5, Charged: 5, Command: []string{"true"}, Walltime: time.Hour, MaxAttempts: 3,
			JobOptions: &JobOptions{Env: map[string]string{"A": "1"}, Name: "n", After: []string{"j1"}},
			State:      StateSucceeded, Attempt: 1,
			JobOutcome: &JobOutcome{Host: "h1", Devices: []string{"GPU-0"}, Model: "H200", ExitCode: &code, RuntimeMS: 60000,
				DispatchedAt: at, StartedAt: at, EndedAt: at.Add(time.Minute)},
			SubmitSeq: 2, SubmittedAt: at, Seq: 9},
	} {
		data, err := MarshalJob(j)
		if err != nil {
			t.Fatal(err)
		}
		var r JobRecord
		if !(&jobDecoder{data: data}).record(&r) {
			t.Errorf("the codec left %s to encoding/json", data)
		}
		if got := r.Job(); !reflect.DeepEqual(got, j) {
			t.Errorf("decoded %s as %+v, want %+v", data, got, j)
		}
	}
}

// What every pending job holds stays small: the options and the outcome,
// nil for a job submitted without options that has not run, are pointers.
// (The flat struct was 576 bytes; a million pending jobs are a takeover's
// load.)
func TestJobWithoutOptionsOrOutcomeIsSmall(t *testing.T) {
	if n := unsafe.Sizeof(Job{}); n > 240 {
		t.Errorf("a job is %d bytes, want at most 240", n)
	}
	st := New()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	st.Apply(Admin{Account: "a", ID: "create", Op: OpCreate, Balance: 100}, 1, at)
	st.Apply(Submit{Account: "a", ID: "j", GPUs: 1, Cost: 1, Command: []string{"true"}, Walltime: time.Hour, MaxAttempts: 3}, 2, at)
	if j := st.Jobs["j"]; j == nil || j.State != StatePending || j.JobOptions != nil || j.JobOutcome != nil {
		t.Errorf("a plain pending job = %+v, want one without options or outcome", j)
	}
}

// Decoding a pending job's record allocates the job, its strings and its
// command, and nothing for the options and outcome it does not have: a
// takeover decodes a million of them, and garbage is what its collector
// spends its time on.
func TestJobCodecDecodesAPendingJobWithFewAllocations(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	j := &Job{ID: "pend-0000001", Account: "vision", GPUs: 1, Cost: 5, Reserved: 5, Command: []string{"python", "train.py"},
		Walltime: time.Hour, MaxAttempts: 3, State: StatePending, SubmitSeq: 1, SubmittedAt: at, Seq: 1}
	data, err := MarshalJob(j)
	if err != nil {
		t.Fatal(err)
	}
	// The job, its id, its account, the command's slice and two strings.
	const want = 6
	if n := testing.AllocsPerRun(100, func() {
		if _, err := UnmarshalJob(data); err != nil {
			t.Fatal(err)
		}
	}); n > want {
		t.Errorf("decoding %s allocates %v times, want at most %d", data, n, want)
	}
}

// A JobDecoder's jobs hold the id their caller gave and one string per
// account, and decoding allocates only the job and its command.
func TestJobDecoderSharesIDsAndAccounts(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var d JobDecoder
	var jobs []*Job
	for _, id := range []string{"j1", "j2"} {
		data, err := MarshalJob(&Job{ID: id, Account: "vision", GPUs: 1, Cost: 5, Reserved: 5, Command: []string{"python", "train.py"},
			Walltime: time.Hour, MaxAttempts: 3, State: StatePending, SubmitSeq: 1, SubmittedAt: at, Seq: 1})
		if err != nil {
			t.Fatal(err)
		}
		want := "job." + id
		j, err := d.Unmarshal(data, want[len("job."):])
		if err != nil {
			t.Fatal(err)
		}
		if j.ID != id || unsafe.StringData(j.ID) != unsafe.StringData(want[len("job."):]) {
			t.Errorf("job %s holds a copy of its id", id)
		}
		jobs = append(jobs, j)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := d.Unmarshal(data, want[len("job."):]); err != nil {
				t.Fatal(err)
			}
		}); n > 4 {
			t.Errorf("decoding %s allocates %v times, want at most 4 (the job, the command's slice and strings)", data, n)
		}
	}
	if unsafe.StringData(jobs[0].Account) != unsafe.StringData(jobs[1].Account) {
		t.Errorf("the jobs of one account hold two strings for it")
	}
	// Another id than the record's is not taken for it.
	data, err := MarshalJob(jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	if j, err := d.Unmarshal(data, "other"); err != nil || j.ID != "j1" {
		t.Errorf("decoded %+v, %v; want job j1", j, err)
	}
}
