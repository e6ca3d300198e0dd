package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// Version is the contract version every message carries in its "v" field.
const Version = 1

// MaxMessageBytes is the largest message gpuq accepts. Streams are created
// with this as their max message size.
const MaxMessageBytes = 1 << 20

// Message is one message to publish: its subject, its de-duplication id
// (the Nats-Msg-Id header), any other headers, and its body.
type Message struct {
	Subject string
	MsgID   string
	Header  map[string]string
	Data    []byte
}

// DecodeError is a command that could not be decoded or addressed. It says
// which account the command came from (when the subject named a valid one),
// the machine-readable reason and what was wrong.
type DecodeError struct {
	Account string        // the subject's account, "" if none or not valid
	Job     string        // the job the body named, if it could be read
	Reason  ledger.Reason // ledger.ReasonInvalid or ledger.ReasonAccountMismatch
	Err     error
}

func (e *DecodeError) Error() string { return e.Err.Error() }

func (e *DecodeError) Unwrap() error { return e.Err }

// Command returns the [ledger.Invalid] command the fold applies in place of
// the undecodable entry, so the sender gets a rejection event.
func (e *DecodeError) Command() ledger.Invalid {
	return ledger.Invalid{Account: e.Account, Job: e.Job, Reason: e.Reason, Message: e.Err.Error()}
}

// DecodeCommand decodes one entry of the command stream from its subject and
// body. A subject outside the contract, a body that is not valid v1 JSON, a
// field out of range or a body naming another account all yield a
// [*DecodeError]; a returned command has passed its Validate method.
func DecodeCommand(n subjects.Names, subject string, data []byte) (ledger.Command, error) {
	cmd, err := n.ParseCmd(subject)
	if err != nil {
		return nil, &DecodeError{Reason: ledger.ReasonInvalid, Err: err}
	}
	switch cmd.Kind {
	case subjects.KindSubmit:
		return DecodeSubmit(cmd.Token, data)
	case subjects.KindCancel:
		return DecodeCancel(cmd.Token, data)
	case subjects.KindModify:
		return DecodeModify(cmd.Token, data)
	case subjects.KindAdmin:
		return DecodeAdmin(cmd.Token, data)
	case subjects.KindReport:
		return DecodeReport(cmd.Token, data)
	case subjects.KindSched:
		switch cmd.Token {
		case subjects.SchedDispatch:
			return DecodeDispatch(data)
		case subjects.SchedUnplaceable:
			return DecodeUnplaceable(data)
		case subjects.SchedAdmit:
			return DecodeAdmit(data)
		case subjects.SchedLost:
			return DecodeLost(data)
		case subjects.SchedArchive:
			return DecodeArchive(data)
		case subjects.SchedSeal:
			return DecodeSeal(data)
		}
	case subjects.KindConfig:
		return DecodePricing(data)
	}
	return nil, &DecodeError{Reason: ledger.ReasonInvalid, Err: fmt.Errorf("subject %q: unhandled command kind %q", subject, cmd.Kind)}
}

// EncodeCommand returns the message that logs c: the inverse of
// [DecodeCommand], which gives c back from the message's subject and body,
// for every kind of command the log holds. It fails for a command its
// kind's Validate method (or subject tokens) would refuse, and for
// [ledger.Invalid], which stands in the fold for an entry that could not be
// decoded and is never published. Each kind has its own encoder
// ([EncodeSubmit], …); a new kind is one more case here and in
// DecodeCommand.
func EncodeCommand(n subjects.Names, c ledger.Command) (Message, error) {
	switch c := c.(type) {
	case ledger.Submit:
		return EncodeSubmit(n, c)
	case ledger.Cancel:
		return EncodeCancel(n, c)
	case ledger.Modify:
		return EncodeModify(n, c)
	case ledger.Admin:
		return EncodeAdmin(n, c)
	case ledger.Report:
		return EncodeReport(n, c)
	case ledger.Dispatch:
		return EncodeDispatch(n, c)
	case ledger.Unplaceable:
		return EncodeUnplaceable(n, c)
	case ledger.Admit:
		return EncodeAdmit(n, c)
	case ledger.Lost:
		return EncodeLost(n, c)
	case ledger.Archive:
		return EncodeArchive(n, c)
	case ledger.Seal:
		return EncodeSeal(n, c)
	case ledger.SetPricing:
		return EncodePricing(n, c)
	case ledger.Invalid:
		return Message{}, errors.New("encode command: an invalid command stands for an undecodable entry and is never published")
	}
	return Message{}, fmt.Errorf("encode command: no encoder for %T", c)
}

// decodeError wraps a body problem of a command from account (or host):
// reason too_large if it is one of size, invalid otherwise.
func decodeError(account, job, what string, err error) *DecodeError {
	return &DecodeError{Account: account, Job: job, Reason: ledger.ReasonFor(err), Err: fmt.Errorf("%s rejected: %w", what, err)}
}

// checkAccount records a mismatch between the subject's account and an
// account the body names, if it names one.
func checkAccount(f *fields, account string) error {
	if named := f.str("account", false); named != "" && named != account {
		return fmt.Errorf("the body names account %q but was sent on the subject of account %q", named, account)
	}
	return nil
}

// DecodeSubmit decodes the body of gpuq.cmd.submit.<account>.
func DecodeSubmit(account string, data []byte) (ledger.Submit, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Submit{}, decodeError(account, "", "submission", err)
	}
	_, priced := f.raw("cost")
	s := ledger.Submit{
		Account:     account,
		ID:          f.token("id", "job id", true),
		Priority:    f.int("priority", false),
		GPUs:        f.int("gpus", true),
		Cost:        ledger.Credits(f.int64("cost", false)),
		Metered:     !priced, // no cost: charged for the runtime it uses
		Command:     f.strs("command", true),
		Env:         f.strMap("env"),
		Walltime:    f.duration("walltime", false),
		MaxAttempts: f.int("max_attempts", false),
		Hold:        f.bool("hold"),
		Name:        f.str("name", false),
		GPUModel:    f.str("gpu_model", false),
		Workdir:     f.str("workdir", false),
		ArrayID:     f.token("array_id", "array id", false),
		ArrayIndex:  f.int("array_index", false),
	}
	s.After, s.AfterAny = f.strs("after", false), f.strs("after_any", false)
	if err := checkDependencyTokens(s); err != nil {
		f.bad("%v", err)
	}
	if err := checkAccount(f, account); err != nil {
		return ledger.Submit{}, &DecodeError{Account: account, Job: s.ID, Reason: ledger.ReasonAccountMismatch, Err: err}
	}
	if err := f.err(); err != nil {
		return ledger.Submit{}, decodeError(account, s.ID, "submission", err)
	}
	if err := s.Validate(); err != nil {
		return ledger.Submit{}, decodeError(account, s.ID, "submission of "+s.ID, err)
	}
	return s, nil
}

type submitBody struct {
	V           int               `json:"v"`
	ID          string            `json:"id"`
	Priority    int               `json:"priority"`
	GPUs        int               `json:"gpus"`
	Cost        *ledger.Credits   `json:"cost,omitempty"` // absent: metered
	Command     []string          `json:"command"`
	Env         map[string]string `json:"env,omitempty"`
	Walltime    string            `json:"walltime,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	Hold        bool              `json:"hold,omitempty"`
	Name        string            `json:"name,omitempty"`
	GPUModel    string            `json:"gpu_model,omitempty"`
	Workdir     string            `json:"workdir,omitempty"`
	ArrayID     string            `json:"array_id,omitempty"`
	ArrayIndex  int               `json:"array_index,omitempty"`
	After       []string          `json:"after,omitempty"`
	AfterAny    []string          `json:"after_any,omitempty"`
}

// EncodeSubmit returns the message that submits s. It fails if s would be
// rejected as invalid.
func EncodeSubmit(n subjects.Names, s ledger.Submit) (Message, error) {
	if err := errors.Join(subjects.CheckToken("account", s.Account), subjects.CheckToken("job id", s.ID), checkArrayToken(s.ArrayID), checkDependencyTokens(s), s.Validate()); err != nil {
		return Message{}, err
	}
	body := submitBody{V: Version, ID: s.ID, Priority: s.Priority, GPUs: s.GPUs,
		Command: s.Command, Env: s.Env, MaxAttempts: s.MaxAttempts, Hold: s.Hold}
	body.Name = s.Name
	body.GPUModel = s.GPUModel
	body.Workdir = s.Workdir
	body.ArrayID, body.ArrayIndex = s.ArrayID, s.ArrayIndex
	body.After, body.AfterAny = s.After, s.AfterAny
	if !s.Metered {
		body.Cost = &s.Cost
	}
	if s.Walltime > 0 {
		body.Walltime = s.Walltime.String()
	}
	msg, err := encode(n.Submit(s.Account), "", body)
	if err != nil {
		return Message{}, err
	}
	msg.MsgID = SubmitMsgID(s.Account, s.ID, msg.Data)
	return msg, nil
}

// checkDependencyTokens reports whether every job a submission waits for
// is named by a token, as a job id is.
func checkDependencyTokens(s ledger.Submit) error {
	var errs []error
	for _, id := range slices.Concat(s.After, s.AfterAny) {
		if err := subjects.CheckToken("dependency", id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkArrayToken reports whether an array id, when set, is a token as a
// job id is.
func checkArrayToken(id string) error {
	if id == "" {
		return nil
	}
	return subjects.CheckToken("array id", id)
}

// DecodeCancel decodes the body of gpuq.cmd.cancel.<account>.
func DecodeCancel(account string, data []byte) (ledger.Cancel, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Cancel{}, decodeError(account, "", "cancel", err)
	}
	c := ledger.Cancel{Account: account, Job: f.token("id", "job id", true)}
	if err := checkAccount(f, account); err != nil {
		return ledger.Cancel{}, &DecodeError{Account: account, Job: c.Job, Reason: ledger.ReasonAccountMismatch, Err: err}
	}
	if err := f.done(account, c.Job, "cancel", c); err != nil {
		return ledger.Cancel{}, err
	}
	return c, nil
}

// EncodeCancel returns the message that cancels c.Job of c.Account.
func EncodeCancel(n subjects.Names, c ledger.Cancel) (Message, error) {
	if err := errors.Join(subjects.CheckToken("account", c.Account), subjects.CheckToken("job id", c.Job)); err != nil {
		return Message{}, err
	}
	return encode(n.Cancel(c.Account), CancelMsgID(c.Account, c.Job), struct {
		V  int    `json:"v"`
		ID string `json:"id"`
	}{Version, c.Job})
}

// DecodeModify decodes the body of gpuq.cmd.modify.<account>:
// {"v":1,"id":JOB,"op":"hold"|"release"|"priority","priority":N}.
func DecodeModify(account string, data []byte) (ledger.Modify, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Modify{}, decodeError(account, "", "modify", err)
	}
	op := ledger.ModifyOp(f.str("op", true))
	// A priority update must say the priority: a missing one is not 0.
	m := ledger.Modify{Account: account, Job: f.token("id", "job id", true), Op: op, Priority: f.int("priority", op == ledger.OpPriority)}
	if err := checkAccount(f, account); err != nil {
		return ledger.Modify{}, &DecodeError{Account: account, Job: m.Job, Reason: ledger.ReasonAccountMismatch, Err: err}
	}
	if err := f.done(account, m.Job, string(m.Op), m); err != nil {
		return ledger.Modify{}, err
	}
	return m, nil
}

// EncodeModify returns the message that applies m to m.Job of m.Account.
func EncodeModify(n subjects.Names, m ledger.Modify) (Message, error) {
	if err := errors.Join(subjects.CheckToken("account", m.Account), subjects.CheckToken("job id", m.Job), m.Validate()); err != nil {
		return Message{}, err
	}
	var priority *int // sent, 0 included, with a priority update only
	if m.Op == ledger.OpPriority {
		priority = &m.Priority
	}
	return encode(n.Modify(m.Account), ModifyMsgID(m.Account, m.Job, m.Op), struct {
		V        int             `json:"v"`
		ID       string          `json:"id"`
		Op       ledger.ModifyOp `json:"op"`
		Priority *int            `json:"priority,omitempty"`
	}{Version, m.Job, m.Op, priority})
}

// DecodeAdmin decodes the body of gpuq.cmd.admin.<account>.
func DecodeAdmin(account string, data []byte) (ledger.Admin, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Admin{}, decodeError(account, "", "admin command", err)
	}
	a := ledger.Admin{Account: account, ID: f.token("id", "op id", true), Op: ledger.AdminOp(f.str("op", true))}
	switch a.Op {
	case ledger.OpCreate:
		a.Balance = ledger.Credits(f.int64("balance", false))
	case ledger.OpGrant:
		a.Amount = ledger.Credits(f.int64("amount", true))
	case ledger.OpLimits:
		a.Limits = ledger.Limits{MaxRunningJobs: f.int("max_running_jobs", false), MaxRunningGPUs: f.int("max_running_gpus", false)}
	case ledger.OpRefill:
		a.RatePerHour, a.Cap = ledger.Credits(f.int64("rate_per_hour", true)), ledger.Credits(f.int64("cap", true))
	case ledger.OpWeight:
		a.Weight = f.int("weight", true)
	}
	if err := checkAccount(f, account); err != nil {
		return ledger.Admin{}, &DecodeError{Account: account, Reason: ledger.ReasonAccountMismatch, Err: err}
	}
	if err := f.done(account, "", "admin command", a); err != nil {
		return ledger.Admin{}, err
	}
	return a, nil
}

type adminBody struct {
	V              int             `json:"v"`
	ID             string          `json:"id"`
	Op             ledger.AdminOp  `json:"op"`
	Balance        ledger.Credits  `json:"balance,omitempty"`
	Amount         ledger.Credits  `json:"amount,omitempty"`
	MaxRunningJobs *int            `json:"max_running_jobs,omitempty"`
	MaxRunningGPUs *int            `json:"max_running_gpus,omitempty"`
	RatePerHour    *ledger.Credits `json:"rate_per_hour,omitempty"`
	Cap            *ledger.Credits `json:"cap,omitempty"`
	Weight         int             `json:"weight,omitempty"`
}

// EncodeAdmin returns the message of admin command a.
func EncodeAdmin(n subjects.Names, a ledger.Admin) (Message, error) {
	if err := errors.Join(subjects.CheckToken("account", a.Account), subjects.CheckToken("op id", a.ID), a.Validate()); err != nil {
		return Message{}, err
	}
	body := adminBody{V: Version, ID: a.ID, Op: a.Op, Balance: a.Balance, Amount: a.Amount, Weight: a.Weight}
	switch a.Op {
	case ledger.OpLimits:
		body.MaxRunningJobs, body.MaxRunningGPUs = &a.Limits.MaxRunningJobs, &a.Limits.MaxRunningGPUs
	case ledger.OpRefill:
		body.RatePerHour, body.Cap = &a.RatePerHour, &a.Cap
	}
	return encode(n.Admin(a.Account), AdminMsgID(a.Account, a.ID), body)
}

// DecodeReport decodes the body of gpuq.cmd.report.<host>.
func DecodeReport(host string, data []byte) (ledger.Report, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Report{}, decodeError("", "", "report from "+host, err)
	}
	r := ledger.Report{Host: host, Type: ledger.ReportType(f.str("type", true)), Job: f.token("job", "job id", true), Attempt: f.int("attempt", true)}
	switch r.Type {
	case ledger.ReportStarted:
		r.Devices = f.strs("devices", true)
		r.Model = f.str("model", false)
	case ledger.ReportDone:
		r.ExitCode = f.int("exit_code", true)
		r.Infra = f.str("infra", false)
		ms := f.int64("runtime_ms", false)
		if ms < 0 || ms > int64(ledger.MaxWalltime/time.Millisecond)*2 {
			f.bad("runtime_ms: %d is out of range", ms)
		}
		r.Runtime = time.Duration(ms) * time.Millisecond
	case ledger.ReportRejected:
		r.Reason = f.str("reason", true)
		r.Busy = f.bool("busy")
	}
	if named := f.str("host", false); named != "" && named != host {
		f.bad("the body names host %q but was sent on the subject of host %q", named, host)
	}
	if err := f.done("", r.Job, "report from "+host, r); err != nil {
		return ledger.Report{}, err
	}
	return r, nil
}

type reportBody struct {
	V         int               `json:"v"`
	Job       string            `json:"job"`
	Attempt   int               `json:"attempt"`
	Type      ledger.ReportType `json:"type"`
	Devices   []string          `json:"devices,omitempty"`
	Model     string            `json:"model,omitempty"`
	ExitCode  *int              `json:"exit_code,omitempty"`
	RuntimeMS *int64            `json:"runtime_ms,omitempty"`
	Infra     string            `json:"infra,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	Busy      bool              `json:"busy,omitempty"`
}

// EncodeReport returns the message of worker report r.
func EncodeReport(n subjects.Names, r ledger.Report) (Message, error) {
	if err := errors.Join(subjects.CheckToken("host", r.Host), subjects.CheckToken("job id", r.Job), r.Validate()); err != nil {
		return Message{}, err
	}
	body := reportBody{V: Version, Job: r.Job, Attempt: r.Attempt, Type: r.Type, Devices: r.Devices, Model: r.Model, Reason: r.Reason, Infra: r.Infra, Busy: r.Busy}
	if r.Type == ledger.ReportDone {
		ms := r.Runtime.Milliseconds()
		body.ExitCode, body.RuntimeMS = &r.ExitCode, &ms
	}
	return encode(n.Report(r.Host), ReportMsgID(r.Host, r.Job, r.Attempt, r.Type), body)
}

// DecodeDispatch decodes the body of gpuq.cmd.sched.dispatch.
func DecodeDispatch(data []byte) (ledger.Dispatch, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Dispatch{}, decodeError("", "", "dispatch decision", err)
	}
	d := ledger.Dispatch{Job: f.token("job", "job id", true), Attempt: f.int("attempt", true), Host: f.token("host", "host", true)}
	if err := f.done("", d.Job, "dispatch decision", d); err != nil {
		return ledger.Dispatch{}, err
	}
	return d, nil
}

// EncodeDispatch returns the message logging dispatch decision d.
func EncodeDispatch(n subjects.Names, d ledger.Dispatch) (Message, error) {
	if err := errors.Join(subjects.CheckToken("job id", d.Job), subjects.CheckToken("host", d.Host), d.Validate()); err != nil {
		return Message{}, err
	}
	return encode(n.Sched(subjects.SchedDispatch), DispatchMsgID(d.Job, d.Attempt), struct {
		V       int    `json:"v"`
		Job     string `json:"job"`
		Attempt int    `json:"attempt"`
		Host    string `json:"host"`
	}{Version, d.Job, d.Attempt, d.Host})
}

// DecodeLost decodes the body of gpuq.cmd.sched.lost.
func DecodeLost(data []byte) (ledger.Lost, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Lost{}, decodeError("", "", "lost decision", err)
	}
	l := ledger.Lost{Job: f.token("job", "job id", true), Attempt: f.int("attempt", true), Reason: f.str("reason", true)}
	if err := f.done("", l.Job, "lost decision", l); err != nil {
		return ledger.Lost{}, err
	}
	return l, nil
}

// EncodeLost returns the message logging lost decision l.
func EncodeLost(n subjects.Names, l ledger.Lost) (Message, error) {
	if err := errors.Join(subjects.CheckToken("job id", l.Job), l.Validate()); err != nil {
		return Message{}, err
	}
	return encode(n.Sched(subjects.SchedLost), LostMsgID(l.Job, l.Attempt), struct {
		V       int    `json:"v"`
		Job     string `json:"job"`
		Attempt int    `json:"attempt"`
		Reason  string `json:"reason"`
	}{Version, l.Job, l.Attempt, l.Reason})
}

// DecodeUnplaceable decodes the body of gpuq.cmd.sched.unplaceable.
func DecodeUnplaceable(data []byte) (ledger.Unplaceable, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Unplaceable{}, decodeError("", "", "unplaceable decision", err)
	}
	u := ledger.Unplaceable{Job: f.token("job", "job id", true), Message: f.str("message", true)}
	if err := f.done("", u.Job, "unplaceable decision", u); err != nil {
		return ledger.Unplaceable{}, err
	}
	return u, nil
}

// EncodeUnplaceable returns the message logging unplaceable decision u.
func EncodeUnplaceable(n subjects.Names, u ledger.Unplaceable) (Message, error) {
	if err := errors.Join(subjects.CheckToken("job id", u.Job), u.Validate()); err != nil {
		return Message{}, err
	}
	return encode(n.Sched(subjects.SchedUnplaceable), UnplaceableMsgID(u.Job), struct {
		V       int    `json:"v"`
		Job     string `json:"job"`
		Message string `json:"message"`
	}{Version, u.Job, u.Message})
}

// DecodeAdmit decodes the body of gpuq.cmd.sched.admit.
func DecodeAdmit(data []byte) (ledger.Admit, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Admit{}, decodeError("", "", "admit decision", err)
	}
	a := ledger.Admit{Account: f.token("account", "account", true), Due: f.time("due", false)}
	if err := f.done("", "", "admit decision", a); err != nil {
		return ledger.Admit{}, err
	}
	return a, nil
}

// EncodeAdmit returns the message logging the decision to admit a.Account's
// held jobs, made for the moment a.Due: the refill was expected to cover
// the oldest held job then. Two decisions for the same moment are one.
func EncodeAdmit(n subjects.Names, a ledger.Admit) (Message, error) {
	if err := errors.Join(subjects.CheckToken("account", a.Account), a.Validate()); err != nil {
		return Message{}, err
	}
	body := struct {
		V       int    `json:"v"`
		Account string `json:"account"`
		Due     string `json:"due,omitempty"`
	}{V: Version, Account: a.Account}
	if !a.Due.IsZero() {
		body.Due = a.Due.UTC().Format(time.RFC3339Nano)
	}
	return encode(n.Sched(subjects.SchedAdmit), AdmitMsgID(a.Account, a.Due), body)
}

type pricingBody struct {
	V              int                       `json:"v"`
	ID             string                    `json:"id"`
	PerGPUHour     map[string]ledger.Credits `json:"per_gpu_hour,omitempty"`
	Default        ledger.Credits            `json:"default"`
	FailurePercent int                       `json:"failure_percent"`
	// FixedCost is the fixed-cost policy: absent (as in bodies written
	// before it existed) or "any" accepts any cost.
	FixedCost ledger.FixedCostPolicy `json:"fixed_cost,omitempty"`
}

// DecodePricing decodes the body of gpuq.cmd.config.pricing.
func DecodePricing(data []byte) (ledger.SetPricing, error) {
	f, err := object(data)
	if err != nil {
		return ledger.SetPricing{}, decodeError("", "", "price table", err)
	}
	p := ledger.SetPricing{ID: f.token("id", "op id", true), Default: ledger.Credits(f.int64("default", false)),
		FailurePercent: f.int("failure_percent", true), FixedCost: ledger.FixedCostPolicy(f.str("fixed_cost", false))}
	if p.FixedCost == "any" {
		p.FixedCost = ledger.FixedCostAny
	}
	if r, ok := f.raw("per_gpu_hour"); ok {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(r, &m); err != nil {
			f.bad("per_gpu_hour: want an object of integer prices, got %s", preview(r))
		}
		for _, model := range slices.Sorted(maps.Keys(m)) { // sorted: the same message every time
			v, err := parseInt(m[model])
			if err != nil {
				f.bad("per_gpu_hour %s: %v", previewString(model), err)
				continue
			}
			if p.PerGPUHour == nil {
				p.PerGPUHour = map[string]ledger.Credits{}
			}
			p.PerGPUHour[model] = ledger.Credits(v)
		}
	}
	if err := f.done("", "", "price table", p); err != nil {
		return ledger.SetPricing{}, err
	}
	return p, nil
}

// EncodePricing returns the message setting price table p.
func EncodePricing(n subjects.Names, p ledger.SetPricing) (Message, error) {
	if err := errors.Join(subjects.CheckToken("op id", p.ID), p.Validate()); err != nil {
		return Message{}, err
	}
	return encode(n.Config(subjects.ConfigPricing), PricingMsgID(p.ID), pricingBody{V: Version, ID: p.ID,
		PerGPUHour: p.PerGPUHour, Default: p.Default, FailurePercent: p.FailurePercent, FixedCost: p.FixedCost})
}

func encode(subject, msgID string, body any) (Message, error) {
	data, err := json.Marshal(body)
	return encoded(subject, msgID, data, err)
}

// encoded is the message of a body encoded as data, or err.
func encoded(subject, msgID string, data []byte, err error) (Message, error) {
	if err != nil {
		return Message{}, fmt.Errorf("encode %s: %w", subject, err)
	}
	return Message{Subject: subject, MsgID: msgID, Data: data}, nil
}

// De-duplication ids. Every command on the command stream carries one that
// names its kind, so ids of different kinds never collide inside the
// stream's duplicate window. Within the window, a retried publish of the
// same id is acknowledged as a duplicate and stored once. The builders below
// give the start of an id, which anyone can work out; every publisher ends
// it with a secret nonce ([WithNonce]), because the server de-duplicates
// across the whole stream and a guessable id can be taken first by any
// publisher, which has the real command dropped as a duplicate.

// SubmitMsgID is the id of a submission of job by account with the given
// body. It ends in a digest of the body, so the server de-duplicates only a
// publish of the very same terms: a submission with other terms under the
// same job id reaches the fold, which answers it (duplicate_conflict) instead
// of the transport answering with the first submission's outcome. A caller
// that means a new attempt at the same terms (say, after a rejection and a
// top-up) gives the message a new id: [WithNonce].
func SubmitMsgID(account, job string, body []byte) string {
	sum := sha256.Sum256(body)
	return "submit." + account + "." + job + "." + hex.EncodeToString(sum[:8])
}

// WithNonce returns msg with nonce added to its de-duplication id. Every
// publisher on the command stream adds one that nobody else can guess (the
// Go client a random one per call, a worker one per report, a scheduler one
// per term), and keeps it across the retries of one publish, which are then
// stored once. A command published again under a new nonce may be stored
// twice; the fold applies it once.
func WithNonce(msg Message, nonce string) Message {
	msg.MsgID += "." + nonce
	return msg
}

// CancelMsgID is the id of a cancel of job by account.
func CancelMsgID(account, job string) string { return "cancel." + account + "." + job }

// ModifyMsgID is the id of a hold, release or priority change of job by
// account. The nonce every publisher adds tells one hold from the next.
func ModifyMsgID(account, job string, op ledger.ModifyOp) string {
	return "modify." + account + "." + job + "." + string(op)
}

// AdminMsgID is the id of admin op opID on account.
func AdminMsgID(account, opID string) string { return "admin." + account + "." + opID }

// ReportMsgID is the id of host's report of type typ on an attempt. It
// names the host, so a report from the wrong host can never stand in for,
// and de-duplicate away, the right host's report.
func ReportMsgID(host, job string, attempt int, typ ledger.ReportType) string {
	return fmt.Sprintf("report.%s.%s.%d.%s", host, job, attempt, typ)
}

// DispatchMsgID is the id of the scheduler's decision to dispatch an attempt.
func DispatchMsgID(job string, attempt int) string {
	return fmt.Sprintf("dispatch.%s.%d", job, attempt)
}

// UnplaceableMsgID is the id of the scheduler's decision that no host fits job.
func UnplaceableMsgID(job string) string { return "unplaceable." + job }

// LostMsgID is the id of the scheduler's decision that an attempt is lost.
func LostMsgID(job string, attempt int) string { return fmt.Sprintf("lost.%s.%d", job, attempt) }

// AdmitMsgID is the id of the scheduler's decision to admit account's held
// jobs at the moment due, so two decisions for the same moment are one.
func AdmitMsgID(account string, due time.Time) string {
	return fmt.Sprintf("admit.%s.%d", account, due.UnixNano())
}

// PricingMsgID is the id of price table op id.
func PricingMsgID(id string) string { return "config.pricing." + id }
