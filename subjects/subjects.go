// Package subjects owns every name gpuq puts on the wire: the NATS subjects,
// stream and bucket names, ledger keys and header names of the v1 contract.
//
// Nothing else in gpuq writes a subject string by hand. A [Names] value, made
// once from the configurable prefix, builds concrete subjects
// ("gpuq.cmd.submit.vision") and parses the subjects the scheduler reads back.
// Tokens (accounts, hosts, job ids) must satisfy [CheckToken]; builders panic
// on a bad token, because validating input is the job of the edge that
// received it, and a subject built from an unchecked token would silently
// route a message nowhere.
//
// The package performs no I/O and imports only the standard library.
package subjects

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// MaxTokenLen is the longest account name, host name or job id, in bytes.
const MaxTokenLen = 64

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "gpuq"

// Header names used on gpuq messages.
const (
	// MsgIDHeader carries the de-duplication id JetStream uses for its
	// duplicate window. On the command stream the id starts with the
	// command's kind, so ids of different kinds never collide:
	// submit.<account>.<job> on a submission, admin.<account>.<op> on an
	// admin command, report.<host>.… on a report, and so on, and ends in a
	// secret nonce, so no other publisher can take it first. Effects and
	// orders carry ids derived from what produced them (only the scheduler
	// publishes those); output chunks carry none (see wire.LogChunk).
	// Package wire builds every one.
	MsgIDHeader = "Nats-Msg-Id"

	// Headers of a job output chunk on gpuq.log.<account>.<job>.<host>.
	LogAttemptHeader = "Gpuq-Attempt"       // the attempt that wrote it
	LogStreamHeader  = "Gpuq-Stream"        // "stdout" or "stderr"; empty on the end marker
	LogSeqHeader     = "Gpuq-Seq"           // the chunk's number within the attempt, from 1
	LogEndHeader     = "Gpuq-End"           // on the last chunk of an attempt: how it ended
	LogTruncHeader   = "Gpuq-Truncated"     // the attempt wrote more than the cap; the rest was dropped
	LogDroppedHeader = "Gpuq-Dropped-Bytes" // with Gpuq-Truncated: how many bytes were dropped
)

// Command kinds: the third token of a subject on the command stream.
const (
	KindSubmit = "submit"
	KindCancel = "cancel"
	KindModify = "modify"
	KindAdmin  = "admin"
	KindReport = "report"
	KindSched  = "sched"
	KindConfig = "config"
)

// Configuration kinds: the last token of gpuq.cmd.config.<kind>.
const (
	ConfigPricing = "pricing"
)

// Scheduler decision kinds: the last token of gpuq.cmd.sched.<kind>.
const (
	SchedDispatch    = "dispatch"
	SchedLost        = "lost"
	SchedUnplaceable = "unplaceable"
	SchedAdmit       = "admit"
	SchedArchive     = "archive"
	SchedSeal        = "seal"
)

// Ledger bucket keys that are not per account or per job.
const (
	CheckpointKey = "sched.checkpoint"
	LeaderKey     = "sched.leader"
	PricingKey    = "sched.pricing" // the price table of metered jobs
	// StandbyKeys are the keys standby schedulers announce themselves
	// under, each with a TTL: sched.standby.<name> (see [StandbyKey]).
	StandbyKeys = "sched.standby.>"
)

// StandbyKey is the ledger key a standby scheduler named name announces
// itself under: sched.standby.<name>, or, for a name that is not a token (a
// host name with dots), sched.standby.x<the first 16 bytes of its SHA-256
// in hex>. The value names the scheduler in full.
func StandbyKey(name string) string {
	if CheckToken("scheduler name", name) == nil {
		return "sched.standby." + name
	}
	sum := sha256.Sum256([]byte(name))
	return "sched.standby.x" + hex.EncodeToString(sum[:16])
}

// ErrBadToken reports a token that is not a valid account, host or job name.
var ErrBadToken = errors.New("subjects: bad token")

// ErrBadSubject reports a subject that is not part of the gpuq contract.
var ErrBadSubject = errors.New("subjects: not a gpuq subject")

// TokenError describes a token that is not a valid account, host or job
// name. It matches [ErrBadToken] with errors.Is.
type TokenError struct {
	What    string // "account", "host", "job id", …
	Token   string
	Problem string
}

func (e *TokenError) Error() string {
	if e.Token == "" {
		return e.What + " " + e.Problem
	}
	t := e.Token
	if len(t) > 24 {
		t = t[:24] + "…"
	}
	return fmt.Sprintf("%s %q %s", e.What, t, e.Problem)
}

// Unwrap returns [ErrBadToken].
func (e *TokenError) Unwrap() error { return ErrBadToken }

// CheckToken reports whether s may be used as a subject token: 1 to
// [MaxTokenLen] bytes of ASCII letters, digits, '_' and '-'. what names the
// token in the error ("account", "host", "job id"). The error is a
// [*TokenError], which matches [ErrBadToken].
func CheckToken(what, s string) error {
	if s == "" {
		return &TokenError{What: what, Problem: "is empty"}
	}
	if len(s) > MaxTokenLen {
		return &TokenError{What: what, Token: s, Problem: fmt.Sprintf("is %d bytes, more than %d", len(s), MaxTokenLen)}
	}
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			c := fmt.Sprintf("%q", s[i])
			if s[i] >= 0x80 {
				c = "a non-ASCII character"
			}
			return &TokenError{What: what, Token: s, Problem: fmt.Sprintf("has %s at byte %d; use only letters, digits, '_' and '-'", c, i)}
		}
	}
	return nil
}

// ValidToken reports whether s passes [CheckToken].
func ValidToken(s string) bool { return CheckToken("token", s) == nil }

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Names builds and parses the subjects, stream names, bucket names and keys of
// one gpuq installation. The zero value is not usable; call [New].
type Names struct {
	prefix string // subject prefix, e.g. "gpuq"
	upper  string // stream name prefix, e.g. "GPUQ"
}

// Default is the [Names] of an installation with [DefaultPrefix].
var Default = MustNew(DefaultPrefix)

// New returns the names for an installation whose subjects start with prefix.
// The prefix must be a single token (see [CheckToken]); it also prefixes the
// stream names (upper-cased) and bucket names, so two installations can share
// one NATS account.
func New(prefix string) (Names, error) {
	if err := CheckToken("subject prefix", prefix); err != nil {
		return Names{}, err
	}
	return Names{prefix: prefix, upper: strings.ToUpper(prefix)}, nil
}

// MustNew is like [New] but panics on a bad prefix. It is for constants.
func MustNew(prefix string) Names {
	n, err := New(prefix)
	if err != nil {
		panic(err)
	}
	return n
}

// Prefix returns the subject prefix.
func (n Names) Prefix() string { return n.prefix }

// Stream and bucket names.

// CmdStream is the ordered log of every command: GPUQ_CMD.
func (n Names) CmdStream() string { return n.upper + "_CMD" }

// DispatchStream is the work queue of dispatch and cancel orders: GPUQ_DISPATCH.
func (n Names) DispatchStream() string { return n.upper + "_DISPATCH" }

// EventsStream holds job and account facts: GPUQ_EVENTS. (Versions before
// the journal had its own stream kept journal entries here too.)
func (n Names) EventsStream() string { return n.upper + "_EVENTS" }

// JournalStream holds every account's journal, the money record: GPUQ_JOURNAL.
func (n Names) JournalStream() string { return n.upper + "_JOURNAL" }

// LogsStream holds job output chunks: GPUQ_LOGS.
func (n Names) LogsStream() string { return n.upper + "_LOGS" }

// LedgerBucket is the KV bucket of the materialized ledger: gpuq_ledger.
func (n Names) LedgerBucket() string { return n.prefix + "_ledger" }

// HostsBucket is the KV bucket of worker heartbeats: gpuq_hosts.
func (n Names) HostsBucket() string { return n.prefix + "_hosts" }

// Stream filters.

// CmdFilter is the subject filter of the command stream: gpuq.cmd.>.
func (n Names) CmdFilter() string { return n.prefix + ".cmd.>" }

// DispatchFilter is the subject filter of the dispatch stream: gpuq.dispatch.*.
func (n Names) DispatchFilter() string { return n.prefix + ".dispatch.*" }

// EventFilters are the subject filters of the events stream: gpuq.event.>.
func (n Names) EventFilters() []string {
	return []string{n.prefix + ".event.>"}
}

// LogFilter is the subject filter of the logs stream: gpuq.log.*.*.*.
func (n Names) LogFilter() string { return n.prefix + ".log.*.*.*" }

// Stream describes one stream of the contract: its name and subject filters.
type Stream struct {
	Name     string
	Subjects []string
}

// Streams lists every stream of the contract with its subject filters.
// Tests check every builder, and the streams the scheduler sets up, against
// this list.
func (n Names) Streams() []Stream {
	return []Stream{
		{Name: n.CmdStream(), Subjects: []string{n.CmdFilter()}},
		{Name: n.DispatchStream(), Subjects: []string{n.DispatchFilter()}},
		{Name: n.EventsStream(), Subjects: n.EventFilters()},
		{Name: n.JournalStream(), Subjects: []string{n.JournalAll()}},
		{Name: n.LogsStream(), Subjects: []string{n.LogFilter()}},
		{Name: n.HistoryStream(), Subjects: []string{n.HistoryFilter()}},
	}
}

// Command subjects (stream GPUQ_CMD).

// Submit is where a pipeline submits a job for account: gpuq.cmd.submit.<account>.
func (n Names) Submit(account string) string { return n.join("account", account, "cmd", KindSubmit) }

// Cancel is where a job of account is cancelled: gpuq.cmd.cancel.<account>.
func (n Names) Cancel(account string) string { return n.join("account", account, "cmd", KindCancel) }

// Modify is where a waiting job of account is held, released or given
// another priority: gpuq.cmd.modify.<account>.
func (n Names) Modify(account string) string { return n.join("account", account, "cmd", KindModify) }

// Admin is where account administration is sent: gpuq.cmd.admin.<account>.
func (n Names) Admin(account string) string { return n.join("account", account, "cmd", KindAdmin) }

// Report is where the worker on host reports: gpuq.cmd.report.<host>.
func (n Names) Report(host string) string { return n.join("host", host, "cmd", KindReport) }

// Sched is where the scheduler logs a decision of kind ([SchedDispatch],
// [SchedLost], [SchedUnplaceable], [SchedAdmit], [SchedArchive],
// [SchedSeal]):
// gpuq.cmd.sched.<kind>.
func (n Names) Sched(kind string) string { return n.join("decision kind", kind, "cmd", KindSched) }

// Config is where an operator sets installation-wide configuration of kind
// ([ConfigPricing]): gpuq.cmd.config.<kind>.
func (n Names) Config(kind string) string {
	return n.join("configuration kind", kind, "cmd", KindConfig)
}

// Dispatch subjects (stream GPUQ_DISPATCH).

// Dispatch is where host receives dispatch and cancel orders: gpuq.dispatch.<host>.
func (n Names) Dispatch(host string) string { return n.join("host", host, "dispatch") }

// Event subjects (stream GPUQ_EVENTS).

// JobEvent is where facts about job of account are published:
// gpuq.event.<account>.job.<job>.
func (n Names) JobEvent(account, job string) string {
	mustToken("account", account)
	mustToken("job id", job)
	return n.prefix + ".event." + account + ".job." + job
}

// JobEvents is the filter for every job event of account: gpuq.event.<account>.job.*.
func (n Names) JobEvents(account string) string {
	mustToken("account", account)
	return n.prefix + ".event." + account + ".job.*"
}

// AllJobEvents is the filter for every job event of every account:
// gpuq.event.*.job.*.
func (n Names) AllJobEvents() string { return n.prefix + ".event.*.job.*" }

// AccountEvents is the filter for every event of account — its jobs', its
// own and its invalid commands': gpuq.event.<account>.>. A submitter's
// permission to read its events is a permission on this filter.
func (n Names) AccountEvents(account string) string {
	mustToken("account", account)
	return n.prefix + ".event." + account + ".>"
}

// AccountEvent is where account facts and admin outcomes are published:
// gpuq.event.<account>.account.
func (n Names) AccountEvent(account string) string {
	mustToken("account", account)
	return n.prefix + ".event." + account + ".account"
}

// InvalidEvent is where the rejection of a command of account that could not
// be parsed or addressed is published: gpuq.event.<account>.invalid.
func (n Names) InvalidEvent(account string) string {
	mustToken("account", account)
	return n.prefix + ".event." + account + ".invalid"
}

// ConfigEvent is where the outcomes of configuration commands are
// published: gpuq.event.config. Like gpuq.event.invalid it has one token
// fewer than any per-account event subject.
func (n Names) ConfigEvent() string { return n.prefix + ".event.config" }

// UnaddressedEvent is where the rejection of a command that names no valid
// account (a bad subject token, a report about an unknown job) is published:
// gpuq.event.invalid. It has one token fewer than any per-account event
// subject, so it cannot collide with an account's subjects.
func (n Names) UnaddressedEvent() string { return n.prefix + ".event.invalid" }

// Journal is where ledger entries of account are published: gpuq.journal.<account>.
func (n Names) Journal(account string) string { return n.join("account", account, "journal") }

// JournalAll is the filter for every account's journal: gpuq.journal.*.
func (n Names) JournalAll() string { return n.prefix + ".journal.*" }

// Log subjects (stream GPUQ_LOGS).

// Log is where the worker on host streams the output of job of account:
// gpuq.log.<account>.<job>.<host>. The account lets permissions give each
// tenant only its own jobs' output, and the host lets them give each worker
// only chunks tagged with its own host; a reader keeps the chunks from the
// host each attempt ran on.
func (n Names) Log(account, job, host string) string {
	mustToken("account", account)
	mustToken("job id", job)
	mustToken("host", host)
	return n.prefix + ".log." + account + "." + job + "." + host
}

// JobLogs is the filter for the output of job of account from every host:
// gpuq.log.<account>.<job>.*.
func (n Names) JobLogs(account, job string) string {
	mustToken("account", account)
	mustToken("job id", job)
	return n.prefix + ".log." + account + "." + job + ".*"
}

// AccountLogs is the filter for the output of every job of account:
// gpuq.log.<account>.>. A tenant's permission to read its jobs' output is a
// permission on this filter.
func (n Names) AccountLogs(account string) string {
	mustToken("account", account)
	return n.prefix + ".log." + account + ".>"
}

// LogSubject is a parsed subject of the logs stream.
type LogSubject struct {
	Account, Job, Host string
}

// ParseLog parses a subject of the logs stream,
// gpuq.log.<account>.<job>.<host>. It returns an error wrapping
// [ErrBadSubject] for a subject of another shape, and one wrapping
// [ErrBadToken] for a bad token.
func (n Names) ParseLog(subject string) (LogSubject, error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".log.")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return LogSubject{}, fmt.Errorf("%q: want %s.log.<account>.<job>.<host>: %w", subject, n.prefix, ErrBadSubject)
	}
	for i, what := range []string{"account", "job id", "host"} {
		if err := CheckToken(what, parts[i]); err != nil {
			return LogSubject{}, fmt.Errorf("subject %q: %w", subject, err)
		}
	}
	return LogSubject{Account: parts[0], Job: parts[1], Host: parts[2]}, nil
}

// Ledger bucket keys.

// AccountKey is the ledger key of an account: account.<id>.
func AccountKey(id string) string { mustToken("account", id); return "account." + id }

// JobKey is the ledger key of a job: job.<id>.
func JobKey(id string) string { mustToken("job id", id); return "job." + id }

// HostKey is the key of a host in the hosts bucket: <host>.
func HostKey(host string) string { mustToken("host", host); return host }

// KVSubject is the subject under which KV bucket stores key:
// $KV.<bucket>.<key>. Publishing to it writes the key, with options the KV
// API does not offer (a per-message TTL, an expected last sequence). bucket
// and key must already be valid names; KVSubject does not check them.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// ParseKey splits a ledger key into its kind ("account", "job" or "sched")
// and id.
func ParseKey(key string) (kind, id string, err error) {
	kind, id, ok := strings.Cut(key, ".")
	switch {
	case !ok:
	case kind == "account" || kind == "job":
		if CheckToken(kind, id) == nil {
			return kind, id, nil
		}
	case key == CheckpointKey || key == LeaderKey || key == PricingKey:
		return kind, id, nil
	}
	return "", "", fmt.Errorf("ledger key %q: %w", key, ErrBadSubject)
}

// Cmd is a parsed command subject.
type Cmd struct {
	Kind  string // KindSubmit, KindCancel, KindModify, KindAdmin, KindReport, KindSched or KindConfig
	Token string // the account, host, decision kind or configuration kind the subject names
}

// ParseCmd parses a subject of the command stream. It returns an error
// wrapping [ErrBadSubject] for a subject outside the contract, and one
// wrapping [ErrBadToken] (with the kind filled in) when the shape is right but
// the token is not valid.
func (n Names) ParseCmd(subject string) (Cmd, error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".cmd.")
	if !ok {
		return Cmd{}, fmt.Errorf("%q is not under %s: %w", subject, n.CmdFilter(), ErrBadSubject)
	}
	kind, token, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(token, ".") {
		return Cmd{}, fmt.Errorf("%q: want %s.cmd.<kind>.<token>: %w", subject, n.prefix, ErrBadSubject)
	}
	var what string
	switch kind {
	case KindSubmit, KindCancel, KindModify, KindAdmin:
		what = "account"
	case KindReport:
		what = "host"
	case KindConfig:
		if token != ConfigPricing {
			return Cmd{Kind: kind}, fmt.Errorf("%q: unknown configuration %q: %w", subject, token, ErrBadSubject)
		}
		return Cmd{Kind: kind, Token: token}, nil
	case KindSched:
		if token != SchedDispatch && token != SchedLost && token != SchedUnplaceable && token != SchedAdmit && token != SchedArchive && token != SchedSeal {
			return Cmd{Kind: kind}, fmt.Errorf("%q: unknown decision kind %q: %w", subject, token, ErrBadSubject)
		}
		return Cmd{Kind: kind, Token: token}, nil
	default:
		return Cmd{}, fmt.Errorf("%q: unknown command kind %q: %w", subject, kind, ErrBadSubject)
	}
	if err := CheckToken(what, token); err != nil {
		return Cmd{Kind: kind}, fmt.Errorf("subject %q: %w", subject, err)
	}
	return Cmd{Kind: kind, Token: token}, nil
}

// Match reports whether subject matches the NATS subject filter: '*' matches
// one token and a final '>' one or more.
func Match(filter, subject string) bool {
	f := strings.Split(filter, ".")
	s := strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return i == len(f)-1 && len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) || s[i] == "" {
			return false
		}
	}
	return len(f) == len(s)
}

// join builds prefix.parts….token after checking token.
func (n Names) join(what, token string, parts ...string) string {
	mustToken(what, token)
	return n.prefix + "." + strings.Join(parts, ".") + "." + token
}

func mustToken(what, s string) {
	if err := CheckToken(what, s); err != nil {
		panic(fmt.Sprintf("subjects: unchecked %s reached a builder: %v", what, err))
	}
}
