package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// The messages the scheduler publishes, as readers in any language see them.
// Every one carries the log sequence (seq) and time of the command that
// caused it. Fields may be added in later versions; readers ignore unknown
// fields.

// JobEvent is the body of gpuq.event.<account>.job.<job>.
type JobEvent struct {
	V         int              `json:"v"`
	Type      ledger.EventType `json:"type"`
	Seq       uint64           `json:"seq"`
	Time      time.Time        `json:"time"`
	Job       string           `json:"job"`
	Account   string           `json:"account"`
	State     ledger.JobState  `json:"state,omitempty"`
	Attempt   int              `json:"attempt"`
	Host      string           `json:"host"`
	Devices   []string         `json:"devices,omitempty"`
	Reason    ledger.Reason    `json:"reason"`
	Message   string           `json:"message"`
	Charged   ledger.Credits   `json:"charged"`
	Balance   ledger.Credits   `json:"balance"`
	Available ledger.Credits   `json:"available"`
	ExitCode  *int             `json:"exit_code,omitempty"`
}

// AccountEvent is the body of gpuq.event.<account>.account.
type AccountEvent struct {
	V         int              `json:"v"`
	Type      ledger.EventType `json:"type"`
	Seq       uint64           `json:"seq"`
	Time      time.Time        `json:"time"`
	Account   string           `json:"account"`
	OpID      string           `json:"op_id"`
	Op        ledger.AdminOp   `json:"op"`
	Reason    ledger.Reason    `json:"reason"`
	Message   string           `json:"message"`
	Balance   ledger.Credits   `json:"balance"`
	Reserved  ledger.Credits   `json:"reserved"`
	Available ledger.Credits   `json:"available"`
}

// InvalidEvent is the body of gpuq.event.<account>.invalid and
// gpuq.event.invalid. Its type is always "rejected".
type InvalidEvent struct {
	V       int              `json:"v"`
	Type    ledger.EventType `json:"type"`
	Seq     uint64           `json:"seq"`
	Time    time.Time        `json:"time"`
	Account string           `json:"account,omitempty"`
	Job     string           `json:"job,omitempty"`
	Reason  ledger.Reason    `json:"reason"`
	Message string           `json:"message"`
}

// JournalEntry is the body of gpuq.journal.<account>: one balance movement.
type JournalEntry struct {
	V           int              `json:"v"`
	Kind        ledger.EntryKind `json:"kind"`
	Seq         uint64           `json:"seq"`
	Time        time.Time        `json:"time"`
	Account     string           `json:"account"`
	Job         string           `json:"job,omitempty"`
	OpID        string           `json:"op_id,omitempty"`
	Amount      ledger.Credits   `json:"amount"`
	Reservation ledger.Credits   `json:"reservation,omitempty"` // settle: the reservation settled
	Released    ledger.Credits   `json:"released,omitempty"`    // settle: reservation - amount
	Balance     ledger.Credits   `json:"balance"`
	Reserved    ledger.Credits   `json:"reserved"`
	Reason      ledger.Reason    `json:"reason,omitempty"`
	// The entry's place in the account's hash chain (see
	// [ledger.EntryHash]): its position from 1, the hash of the entry
	// before it and its own. Absent from entries of versions before the
	// chain.
	N    uint64 `json:"n,omitempty"`
	Prev string `json:"prev,omitempty"`
	Hash string `json:"hash,omitempty"`
}

// Ledger returns the journal entry as the ledger's own type.
func (e JournalEntry) Ledger() ledger.Entry {
	return ledger.Entry{Kind: e.Kind, Account: e.Account, Job: e.Job, OpID: e.OpID, Amount: e.Amount,
		Reservation: e.Reservation, Released: e.Released, Balance: e.Balance, Reserved: e.Reserved, Reason: e.Reason,
		Seq: e.Seq, Time: e.Time, N: e.N, Prev: e.Prev, Hash: e.Hash}
}

// ConfigEvent is the body of gpuq.event.config: the outcome of a
// configuration command.
type ConfigEvent struct {
	V       int              `json:"v"`
	Type    ledger.EventType `json:"type"`
	Seq     uint64           `json:"seq"`
	Time    time.Time        `json:"time"`
	OpID    string           `json:"op_id"`
	Reason  ledger.Reason    `json:"reason"`
	Message string           `json:"message"`
}

// DecodeConfigEvent decodes the body of gpuq.event.config.
func DecodeConfigEvent(data []byte) (ConfigEvent, error) {
	var e ConfigEvent
	if err := unmarshalV1("config event", data, &e); err != nil {
		return ConfigEvent{}, err
	}
	if err := nonEmpty("type", string(e.Type)); err != nil {
		return ConfigEvent{}, fmt.Errorf("config event: %w", err)
	}
	return e, nil
}

// Order types on gpuq.dispatch.<host>.
const (
	OrderDispatch = "dispatch"
	OrderCancel   = "cancel"
)

// orderBody is the body of gpuq.dispatch.<host>.
type orderBody struct {
	V        int               `json:"v"`
	Type     string            `json:"type"`
	Seq      uint64            `json:"seq"`
	Job      string            `json:"job"`
	Account  string            `json:"account"`
	Attempt  int               `json:"attempt"`
	GPUs     int               `json:"gpus,omitempty"`
	Command  []string          `json:"command,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Walltime string            `json:"walltime,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	ArrayID  string            `json:"array_id,omitempty"`
	// ArrayIndex is written only with ArrayID.
	ArrayIndex int `json:"array_index,omitempty"`
}

// EffectMsgID is the de-duplication id of the i-th effect of the command at
// log sequence seq. Re-sending a command's effects after a restart gives the
// same ids, so the server stores each once.
func EffectMsgID(seq uint64, i int) string {
	return strconv.FormatUint(seq, 10) + "." + strconv.Itoa(i)
}

// OrderMsgID is the start of the de-duplication id of a dispatch or cancel
// order, which ends with the log sequence of the command that sent it.
func OrderMsgID(job string, attempt int, typ string) string {
	return job + "." + strconv.Itoa(attempt) + "." + typ
}

// EncodeEffect returns the message for e, the i-th effect of the command at
// log sequence seq applied at time at.
func EncodeEffect(n subjects.Names, seq uint64, at time.Time, i int, e ledger.Effect) (Message, error) {
	at = at.UTC()
	id := EffectMsgID(seq, i)
	switch e := e.(type) {
	case ledger.JobEvent:
		subject := n.JobEvent(e.Account, e.Job)
		data, err := marshalJobEvent(JobEvent{V: Version, Type: e.Type, Seq: seq, Time: at,
			Job: e.Job, Account: e.Account, State: e.State, Attempt: e.Attempt, Host: e.Host, Devices: e.Devices,
			Reason: e.Reason, Message: e.Message, Charged: e.Charged, Balance: e.Balance, Available: e.Available,
			ExitCode: e.ExitCode})
		return encoded(subject, id, data, err)
	case ledger.AccountEvent:
		return encode(n.AccountEvent(e.Account), id, AccountEvent{V: Version, Type: e.Type, Seq: seq, Time: at,
			Account: e.Account, OpID: e.OpID, Op: e.Op, Reason: e.Reason, Message: e.Message,
			Balance: e.Balance, Reserved: e.Reserved, Available: e.Available})
	case ledger.ConfigEvent:
		return encode(n.ConfigEvent(), id, ConfigEvent{V: Version, Type: e.Type, Seq: seq, Time: at, OpID: e.OpID,
			Reason: e.Reason, Message: e.Message})
	case ledger.InvalidEvent:
		subject, account := n.UnaddressedEvent(), ""
		if subjects.ValidToken(e.Account) {
			subject, account = n.InvalidEvent(e.Account), e.Account
		}
		job := e.Job
		if !subjects.ValidToken(job) {
			job = ""
		}
		return encode(subject, id, InvalidEvent{V: Version, Type: ledger.EventRejected, Seq: seq, Time: at,
			Account: account, Job: job, Reason: e.Reason, Message: e.Message})
	case ledger.Entry:
		subject := n.Journal(e.Account)
		data, err := marshalJournalEntry(JournalEntry{V: Version, Kind: e.Kind, Seq: seq, Time: at, Account: e.Account,
			Job: e.Job, OpID: e.OpID, Amount: e.Amount, Reservation: e.Reservation, Released: e.Released, Balance: e.Balance,
			Reserved: e.Reserved, Reason: e.Reason, N: e.N, Prev: e.Prev, Hash: e.Hash})
		return encoded(subject, id, data, err)
	case ledger.DispatchOrder:
		// The id ends with the command's sequence, so a job submitted
		// under the id of an archived one gets its own orders; a re-sent
		// copy of the same order keeps its id.
		return encode(n.Dispatch(e.Host), OrderMsgID(e.Job, e.Attempt, OrderDispatch)+"."+strconv.FormatUint(seq, 10), orderBody{V: Version,
			Type: OrderDispatch, Seq: seq, Job: e.Job, Account: e.Account, Attempt: e.Attempt, GPUs: e.GPUs,
			Command: e.Command, Env: e.Env, Walltime: e.Walltime.String(), Workdir: e.Workdir,
			ArrayID: e.ArrayID, ArrayIndex: e.ArrayIndex})
	case ledger.ArchivedJob:
		return encodeHistory(n, seq, at, i, e)
	case ledger.CancelOrder:
		// One attempt may get several cancels, to several hosts (a user's
		// cancel, then a started report for it from a host that should not
		// run it): the id names the command, so the stream's duplicate
		// window drops only a re-sent copy of the same one.
		id := OrderMsgID(e.Job, e.Attempt, OrderCancel) + "." + strconv.FormatUint(seq, 10)
		return encode(n.Dispatch(e.Host), id, orderBody{V: Version,
			Type: OrderCancel, Seq: seq, Job: e.Job, Account: e.Account, Attempt: e.Attempt})
	}
	return Message{}, fmt.Errorf("encode effect: unknown type %T", e)
}

// unmarshalV1 decodes data into v after checking it is a v1 object.
func unmarshalV1(what string, data []byte, v any) error {
	if _, err := object(data); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	return nil
}

func checkTokens(pairs ...string) error {
	var errs []error
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := subjects.CheckToken(pairs[i], pairs[i+1]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DecodeJobEvent decodes the body of gpuq.event.<account>.job.<job>. Types
// added by later versions decode without error; check Type before acting.
func DecodeJobEvent(data []byte) (JobEvent, error) {
	var e JobEvent
	if err := unmarshalV1("job event", data, &e); err != nil {
		return JobEvent{}, err
	}
	if len(e.Devices) == 0 {
		e.Devices = nil
	}
	if err := errors.Join(checkTokens("job id", e.Job, "account", e.Account), nonEmpty("type", string(e.Type))); err != nil {
		return JobEvent{}, fmt.Errorf("job event: %w", err)
	}
	return e, nil
}

// DecodeAccountEvent decodes the body of gpuq.event.<account>.account.
func DecodeAccountEvent(data []byte) (AccountEvent, error) {
	var e AccountEvent
	if err := unmarshalV1("account event", data, &e); err != nil {
		return AccountEvent{}, err
	}
	if err := errors.Join(checkTokens("account", e.Account), nonEmpty("type", string(e.Type))); err != nil {
		return AccountEvent{}, fmt.Errorf("account event: %w", err)
	}
	return e, nil
}

// DecodeInvalidEvent decodes the body of gpuq.event.<account>.invalid or
// gpuq.event.invalid.
func DecodeInvalidEvent(data []byte) (InvalidEvent, error) {
	var e InvalidEvent
	if err := unmarshalV1("invalid event", data, &e); err != nil {
		return InvalidEvent{}, err
	}
	var errs []error
	if e.Account != "" {
		errs = append(errs, subjects.CheckToken("account", e.Account))
	}
	errs = append(errs, nonEmpty("reason", string(e.Reason)))
	if err := errors.Join(errs...); err != nil {
		return InvalidEvent{}, fmt.Errorf("invalid event: %w", err)
	}
	return e, nil
}

// DecodeJournalEntry decodes the body of gpuq.journal.<account>.
func DecodeJournalEntry(data []byte) (JournalEntry, error) {
	var e JournalEntry
	if err := unmarshalV1("journal entry", data, &e); err != nil {
		return JournalEntry{}, err
	}
	if e.Reservation == 0 && bytes.Contains(data, []byte(`"held":`)) /* the key, not the state "held" */ {
		// Written before the field was named "reservation".
		var legacy struct {
			Held ledger.Credits `json:"held"`
		}
		if err := json.Unmarshal(data, &legacy); err != nil {
			return JournalEntry{}, fmt.Errorf("journal entry: %w", err)
		}
		e.Reservation = legacy.Held
	}
	var errs []error
	errs = append(errs, subjects.CheckToken("account", e.Account))
	switch e.Kind {
	case ledger.EntryGrant, ledger.EntryRefill, ledger.EntrySeal:
	case ledger.EntryReserve, ledger.EntrySettle:
		errs = append(errs, subjects.CheckToken("job id", e.Job))
		if e.Amount < 0 {
			errs = append(errs, fmt.Errorf("%s amount %d is negative", e.Kind, e.Amount))
		}
		if e.Kind == ledger.EntrySettle && (e.Reservation < e.Amount || e.Released != e.Reservation-e.Amount) {
			errs = append(errs, fmt.Errorf("settle of a %d reservation, %d charged, %d released does not add up", e.Reservation, e.Amount, e.Released))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown entry kind %q", e.Kind))
	}
	for _, h := range []string{e.Prev, e.Hash} {
		if !chainHash(h) {
			errs = append(errs, fmt.Errorf("hash %.80q is not 64 lower-case hex digits", h))
		}
	}
	for _, c := range []ledger.Credits{e.Amount, e.Reservation, e.Released, e.Balance, e.Reserved} {
		if c > ledger.MaxCredits || c < -ledger.MaxCredits {
			errs = append(errs, fmt.Errorf("amount %d is out of range", c))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return JournalEntry{}, fmt.Errorf("journal entry: %w", err)
	}
	return e, nil
}

// DecodeOrder decodes an order received on gpuq.dispatch.<host>: a
// [ledger.DispatchOrder] or a [ledger.CancelOrder], with Host set to host.
// The seq returned is the log sequence of the command that caused it.
func DecodeOrder(host string, data []byte) (ledger.Effect, uint64, error) {
	f, err := object(data)
	if err != nil {
		return nil, 0, fmt.Errorf("order: %w", err)
	}
	typ := f.str("type", true)
	seq := f.int64("seq", false)
	job, account, attempt := f.token("job", "job id", true), f.token("account", "account", true), f.int("attempt", true)
	if attempt < 1 && len(f.errs) == 0 {
		f.bad("attempt %d is not ≥ 1", attempt)
	}
	switch typ {
	case OrderCancel:
		if err := f.err(); err != nil {
			return nil, 0, fmt.Errorf("cancel order: %w", err)
		}
		return ledger.CancelOrder{Host: host, Job: job, Account: account, Attempt: attempt}, uint64(max(seq, 0)), nil
	case OrderDispatch:
		o := ledger.DispatchOrder{Host: host, Job: job, Account: account, Attempt: attempt,
			GPUs: f.int("gpus", true), Command: f.strs("command", true), Env: f.strMap("env"),
			Walltime: f.duration("walltime", true)}
		o.Workdir = f.str("workdir", false)
		o.ArrayID, o.ArrayIndex = f.token("array_id", "array id", false), f.int("array_index", false)
		if err := f.err(); err != nil {
			return nil, 0, fmt.Errorf("dispatch order: %w", err)
		}
		s := ledger.Submit{Account: account, ID: job, GPUs: o.GPUs, Command: o.Command, Env: o.Env, Walltime: o.Walltime,
			Workdir: o.Workdir, ArrayID: o.ArrayID, ArrayIndex: o.ArrayIndex}
		if err := s.Validate(); err != nil {
			return nil, 0, fmt.Errorf("dispatch order: %w", err)
		}
		return o, uint64(max(seq, 0)), nil
	}
	f.bad("unknown order type %q; want dispatch or cancel", typ)
	return nil, 0, fmt.Errorf("order: %w", f.err())
}

// chainHash reports whether h is empty or a hash as [ledger.EntryHash]
// writes it.
func chainHash(h string) bool {
	if h == "" {
		return true
	}
	if len(h) != 64 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func nonEmpty(name, v string) error {
	if v == "" {
		return fmt.Errorf("%s is empty", name)
	}
	return nil
}
