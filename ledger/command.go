package ledger

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Command is one entry of the command log: a [Submit], [Cancel], [Admin],
// [SetPricing], [Dispatch], [Report], [Lost], [Unplaceable], [Admit],
// [Archive], [Seal] or [Invalid].
type Command interface {
	// Kind names the command in logs and metrics ("submit", "report", …).
	Kind() string
	isCommand()
}

// Submit asks for a job to be reserved and queued.
//
// Zero Walltime and MaxAttempts mean [DefaultWalltime] and
// [DefaultMaxAttempts].
type Submit struct {
	Account  string
	ID       string
	Priority int
	GPUs     int
	// Cost is what a fixed-price job reserves and is charged on success.
	// With Metered, Cost must be zero: the fold computes the reservation
	// from the price table and charges the runtime used.
	Cost        Credits
	Metered     bool
	Command     []string
	Env         map[string]string
	Walltime    time.Duration
	MaxAttempts int
	// Hold makes a submission the account cannot pay for wait, unreserved,
	// instead of being rejected.
	Hold bool
	// Name is a display name, printable text of at most [MaxNameBytes];
	// empty is none. It is not an id: many jobs may share one.
	Name string
	// GPUModel, when set, asks for hosts whose every GPU is of this model,
	// as NVML names it ("NVIDIA H100 80GB HBM3"), compared ignoring case;
	// empty is any host. Printable text of at most [MaxModelBytes].
	GPUModel string
	// Workdir, when set, is the job's working directory on its host: an
	// absolute, clean path of at most [MaxWorkdirBytes]. The worker refuses
	// an attempt whose workdir does not exist or the job's user cannot
	// enter. Empty is the attempt's own directory.
	Workdir string
	// ArrayID, when set, makes the job task ArrayIndex of the job array
	// ArrayID: an id (as a job id is) that the array's tasks share, so they
	// can be listed and cancelled together. Each task is a submission of
	// its own, with its own id and reservation; the worker gives it
	// GPUQ_ARRAY_ID and GPUQ_ARRAY_INDEX. ArrayIndex is 0 to
	// [MaxArrayIndex], and 0 without ArrayID.
	ArrayID    string
	ArrayIndex int
	// After names jobs of the account that must all succeed before this
	// one may run (afterok); AfterAny names jobs that must only have ended,
	// however (afterany). See [MaxDependencies] and the package doc.
	After    []string
	AfterAny []string
}

// Cancel asks for a job of Account to be stopped. A pending job is cancelled
// at once; a dispatched or running one gets a cancel order to its host and is
// settled when the worker reports.
type Cancel struct {
	Account string
	Job     string
}

// AdminOp is the operation of an [Admin] command.
type AdminOp string

// Admin operations.
const (
	OpCreate AdminOp = "create" // create the account with Balance
	OpGrant  AdminOp = "grant"  // add Amount (negative takes credits away)
	OpLimits AdminOp = "limits" // set Limits
	OpRefill AdminOp = "refill" // set RatePerHour and Cap
	OpWeight AdminOp = "weight" // set Weight
)

// Admin is an account administration command. ID is the operator's
// idempotency key: the same ID with the same terms is applied once, the same
// ID with other terms is rejected.
type Admin struct {
	Account     string  `json:"account"`
	ID          string  `json:"id"`
	Op          AdminOp `json:"op"`
	Balance     Credits `json:"balance,omitempty"`
	Amount      Credits `json:"amount,omitempty"`
	Limits      Limits  `json:"limits,omitzero"`
	RatePerHour Credits `json:"rate_per_hour,omitempty"`
	Cap         Credits `json:"cap,omitempty"`
	Weight      int     `json:"weight,omitempty"`
}

// Dispatch is the scheduler's decision to run attempt Attempt of Job on Host.
// It takes effect when the fold applies it, and only if the job is still
// pending and Attempt is the job's next attempt: of two conflicting
// decisions, the first in the log wins.
type Dispatch struct {
	Job     string
	Attempt int
	Host    string
}

// ReportType is the kind of a worker [Report].
type ReportType string

// Report types.
const (
	ReportStarted  ReportType = "started"  // the attempt is running on Devices
	ReportDone     ReportType = "done"     // the attempt exited with ExitCode after Runtime
	ReportRejected ReportType = "rejected" // the worker could not start the attempt, for Reason
)

// Report is a worker's account of an attempt. It counts only if it comes
// from the host and attempt the job was dispatched to, in a state where it
// makes sense.
type Report struct {
	Type     ReportType
	Host     string
	Job      string
	Attempt  int
	Devices  []string      // started
	Model    string        // started: the GPU model of the devices, for metered charging
	ExitCode int           // done
	Runtime  time.Duration // done
	// Infra, on a done report, says the attempt ended through no fault of
	// the job (an Xid on one of its GPUs, a worker drained past its
	// timeout): it is retried like a lost attempt and never charged.
	Infra  string
	Reason string // rejected
	// Busy, on a rejected report, says the host refused only because the
	// GPUs the scheduler counted free were taken when the order arrived (a
	// race with a job ending or starting there): the attempt is requeued
	// without spending one of the job's attempts or waiting a retry delay.
	Busy bool
}

// Lost is the scheduler's decision that an attempt vanished (its host's
// heartbeat expired, or the host no longer lists it). The job is retried or
// failed, and never charged for the attempt.
type Lost struct {
	Job     string
	Attempt int
	Reason  string
}

// Unplaceable is the scheduler's decision that no host can fit a pending
// job: the job fails with [ReasonUnplaceable] and its reservation is
// released. A job that is no longer pending is left alone.
type Unplaceable struct {
	Job     string
	Message string
}

// Invalid stands for a log entry that could not be decoded or addressed. It
// changes nothing; Apply turns it into an [InvalidEvent] so the sender learns
// why. Account is the account the subject named, if it named a valid one.
type Invalid struct {
	Account string
	Job     string // the job id the body named, when it could be read
	Reason  Reason
	Message string
}

func (Submit) Kind() string      { return "submit" }
func (Cancel) Kind() string      { return "cancel" }
func (Admin) Kind() string       { return "admin" }
func (Dispatch) Kind() string    { return "dispatch" }
func (Report) Kind() string      { return "report" }
func (Lost) Kind() string        { return "lost" }
func (Unplaceable) Kind() string { return "unplaceable" }
func (Invalid) Kind() string     { return "invalid" }

func (Submit) isCommand()      {}
func (Cancel) isCommand()      {}
func (Admin) isCommand()       {}
func (Dispatch) isCommand()    {}
func (Report) isCommand()      {}
func (Lost) isCommand()        {}
func (Unplaceable) isCommand() {}
func (Invalid) isCommand()     {}

// WithDefaults returns s with zero Walltime and MaxAttempts replaced by
// their defaults, and an empty Env map made nil.
func (s Submit) WithDefaults() Submit {
	if s.Walltime == 0 {
		s.Walltime = DefaultWalltime
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if len(s.Env) == 0 {
		s.Env = nil
	}
	s.After, s.AfterAny = noneIfEmpty(s.After), noneIfEmpty(s.AfterAny)
	return s
}

// Validate reports every way s is out of range, in one error. Token syntax
// (what may appear in a subject) is the codec's to check; Validate checks
// that ids are present, short and need no escaping, and that every string
// is valid UTF-8 without NUL bytes. A problem of size wraps [ErrTooLarge].
func (s Submit) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, err := range []error{checkID("account", s.Account), checkID("id", s.ID)} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		bad("priority %d is out of range [%d, %d]", s.Priority, MinPriority, MaxPriority)
	}
	if s.GPUs < 1 || s.GPUs > MaxJobGPUs {
		bad("gpus %d is out of range [1, %d]", s.GPUs, MaxJobGPUs)
	}
	switch {
	case s.Metered && s.Cost != 0:
		bad("a metered job has no cost of its own; leave cost out or give it and drop metered")
	case s.Cost < 0:
		bad("cost %d is negative", s.Cost)
	case s.Cost > MaxCredits:
		bad("cost %d is more than the maximum %d", s.Cost, MaxCredits)
	}
	if err := checkCommand(s.Command); err != nil {
		errs = append(errs, err)
	}
	if err := checkEnv(s.Env); err != nil {
		errs = append(errs, err)
	}
	if s.Walltime < 0 || s.Walltime > MaxWalltime {
		bad("walltime %v is out of range (0, %v]", s.Walltime, MaxWalltime)
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > MaxMaxAttempts {
		bad("max_attempts %d is out of range [1, %d]", s.MaxAttempts, MaxMaxAttempts)
	}
	errs = append(errs, nonNil(checkPrintable("name", s.Name, MaxNameBytes))...)
	errs = append(errs, nonNil(checkPrintable("gpu_model", s.GPUModel, MaxModelBytes))...)
	errs = append(errs, nonNil(checkWorkdir(s.Workdir))...)
	switch {
	case s.ArrayID == "" && s.ArrayIndex != 0:
		bad("array_index %d without an array_id", s.ArrayIndex)
	case s.ArrayID == "":
	case s.ArrayIndex < 0 || s.ArrayIndex > MaxArrayIndex:
		bad("array_index %d is out of range [0, %d]", s.ArrayIndex, MaxArrayIndex)
	default:
		errs = append(errs, nonNil(checkID("array_id", s.ArrayID))...)
	}
	errs = append(errs, checkDependencies(s)...)
	return joinProblems(errs)
}

// checkWorkdir reports whether dir is empty or an absolute, clean path of
// printable text.
func checkWorkdir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := checkPrintable("workdir", dir, MaxWorkdirBytes); err != nil {
		return err
	}
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return fmt.Errorf("workdir %s is not an absolute, clean path (want one like /data/run-7, with no . or .. parts, no repeated or trailing /)", preview(dir))
	}
	return nil
}

// checkPrintable reports whether s, the what of a command, is at most max
// bytes of valid UTF-8 with only printable characters (letters, marks,
// numbers, punctuation, symbols and the ASCII space): no control
// characters, no line breaks.
func checkPrintable(what, s string, max int) error {
	if err := checkText(what, s, max); err != nil {
		return err
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%s has the character %U at byte %d; want printable text without control characters or line breaks", what, r, i)
		}
	}
	return nil
}

func checkCommand(cmd []string) error {
	if len(cmd) == 0 {
		return errors.New("command is empty; give the program and its arguments")
	}
	if cmd[0] == "" {
		return errors.New("command[0], the program, is empty")
	}
	if len(cmd) > MaxCommandArgs {
		return tooLarge("command has %d arguments, more than %d", len(cmd), MaxCommandArgs)
	}
	for i, arg := range cmd {
		if err := checkText(fmt.Sprintf("command[%d]", i), arg, MaxCommandBytes); err != nil {
			return err
		}
	}
	if n := encodedStringsLen(cmd); n > MaxCommandBytes {
		return tooLarge("command takes %d bytes as JSON, more than %d (each of < > & and control characters takes 6)", n, MaxCommandBytes)
	}
	return nil
}

// reservedEnv are variables the worker sets itself; a job may not override them.
var reservedEnv = []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}

func checkEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return tooLarge("env has %d variables, more than %d", len(env), MaxEnvVars)
	}
	// Sorted, so the same env always gets the same message.
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if len(k) > MaxEnvBytes {
			return tooLarge("an env name is %d bytes, more than %d", len(k), MaxEnvBytes)
		}
		if !envName(k) {
			return fmt.Errorf("env name %s is not a variable name (letters, digits and '_', not starting with a digit)", preview(k))
		}
		if strings.HasPrefix(k, "GPUQ_") || contains(reservedEnv, k) {
			return fmt.Errorf("env %s is set by the worker and cannot be overridden", k)
		}
		if err := checkText("env "+k, v, MaxEnvBytes); err != nil {
			return err
		}
	}
	if n := encodedMapLen(env); n > MaxEnvBytes {
		return tooLarge("env takes %d bytes as JSON, more than %d (each of < > & and control characters takes 6)", n, MaxEnvBytes)
	}
	return nil
}

func envName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Validate reports whether c names an account and a job.
func (c Cancel) Validate() error {
	return joinProblems(nonNil(checkID("account", c.Account), checkID("id of the job to cancel", c.Job)))
}

// Validate reports every way a is malformed or out of range.
func (a Admin) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	errs = append(errs, nonNil(checkID("account", a.Account), checkID("op id", a.ID))...)
	switch a.Op {
	case OpCreate:
		if !inRange(a.Balance) {
			bad("balance %d is out of range [0, %d]", a.Balance, MaxCredits)
		}
	case OpGrant:
		if a.Amount == 0 {
			bad("grant amount is 0")
		} else if a.Amount > MaxCredits || a.Amount < -MaxCredits {
			bad("grant amount %d is out of range [-%d, %d]", a.Amount, MaxCredits, MaxCredits)
		}
	case OpLimits:
		if a.Limits.MaxRunningJobs < 0 || a.Limits.MaxRunningJobs > MaxLimit {
			bad("max_running_jobs %d is out of range [0, %d] (0 means no cap)", a.Limits.MaxRunningJobs, MaxLimit)
		}
		if a.Limits.MaxRunningGPUs < 0 || a.Limits.MaxRunningGPUs > MaxLimit {
			bad("max_running_gpus %d is out of range [0, %d] (0 means no cap)", a.Limits.MaxRunningGPUs, MaxLimit)
		}
	case OpRefill:
		if !inRange(a.RatePerHour) {
			bad("rate_per_hour %d is out of range [0, %d]", a.RatePerHour, MaxCredits)
		}
		if !inRange(a.Cap) {
			bad("cap %d is out of range [0, %d]", a.Cap, MaxCredits)
		} else if a.RatePerHour > 0 && a.Cap == 0 {
			bad("cap is 0 with rate_per_hour %d; a refill needs a cap above 0", a.RatePerHour)
		}
	case OpWeight:
		if a.Weight < 1 || a.Weight > MaxWeight {
			bad("weight %d is out of range [1, %d]", a.Weight, MaxWeight)
		}
	case "":
		bad("op is empty; want one of create, grant, limits, refill, weight")
	default:
		bad("unknown op %s; want one of create, grant, limits, refill, weight", preview(string(a.Op)))
	}
	return joinProblems(errs)
}

// Validate reports whether d names a job, an attempt ≥ 1 and a host.
func (d Dispatch) Validate() error {
	errs := nonNil(checkID("job", d.Job), checkID("host", d.Host))
	if d.Attempt < 1 {
		errs = append(errs, fmt.Errorf("attempt %d is not ≥ 1", d.Attempt))
	}
	return joinProblems(errs)
}

// Validate reports every way r is malformed for its type. Whether r fits the
// job (device count, host, attempt, state) is decided by Apply.
func (r Report) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	errs = append(errs, nonNil(checkID("host", r.Host), checkID("job", r.Job))...)
	if r.Attempt < 1 {
		bad("attempt %d is not ≥ 1", r.Attempt)
	}
	switch r.Type {
	case ReportStarted:
		if err := checkDevices(r.Devices); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, nonNil(checkText("model", r.Model, MaxModelBytes))...)
	case ReportDone:
		if r.Runtime < 0 {
			bad("runtime %v is negative", r.Runtime)
		}
		errs = append(errs, nonNil(checkText("infra", r.Infra, MaxReasonBytes))...)
	case ReportRejected:
		if r.Reason == "" {
			bad("a rejected report needs a reason")
		} else {
			errs = append(errs, nonNil(checkText("reason", r.Reason, MaxReasonBytes))...)
		}
	case "":
		bad("report type is empty; want started, done or rejected")
	default:
		bad("unknown report type %s; want started, done or rejected", preview(string(r.Type)))
	}
	return joinProblems(errs)
}

func checkDevices(devs []string) error {
	if len(devs) == 0 {
		return errors.New("a started report needs the devices it runs on")
	}
	if len(devs) > MaxJobGPUs {
		return tooLarge("%d devices, more than %d", len(devs), MaxJobGPUs)
	}
	seen := make(map[string]bool, len(devs))
	for i, d := range devs {
		if d == "" {
			return fmt.Errorf("devices[%d] is empty", i)
		}
		if len(d) > MaxDeviceBytes {
			return tooLarge("devices[%d] is %d bytes, more than %d", i, len(d), MaxDeviceBytes)
		}
		for j := 0; j < len(d); j++ {
			if c := d[j]; c <= ' ' || c > '~' || strings.IndexByte(`,"\<>&`, c) >= 0 {
				return fmt.Errorf("devices[%d] %q has %q; want printable ASCII without spaces, commas, quotes, backslashes, < > or &", i, d, c)
			}
		}
		if seen[d] {
			return fmt.Errorf("device %q is listed twice", d)
		}
		seen[d] = true
	}
	return nil
}

// Validate reports whether u names a job and says why it cannot be placed.
func (u Unplaceable) Validate() error {
	errs := nonNil(checkID("job", u.Job))
	if u.Message == "" {
		errs = append(errs, errors.New("an unplaceable decision needs a message"))
	} else {
		errs = append(errs, nonNil(checkText("message", u.Message, MaxReasonBytes))...)
	}
	return joinProblems(errs)
}

// Validate reports whether l names a job, an attempt ≥ 1 and a reason.
func (l Lost) Validate() error {
	errs := nonNil(checkID("job", l.Job))
	if l.Attempt < 1 {
		errs = append(errs, fmt.Errorf("attempt %d is not ≥ 1", l.Attempt))
	}
	if l.Reason == "" {
		errs = append(errs, errors.New("a lost decision needs a reason"))
	} else {
		errs = append(errs, nonNil(checkText("reason", l.Reason, MaxReasonBytes))...)
	}
	return joinProblems(errs)
}
