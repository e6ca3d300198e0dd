package wire

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// DecodeArchive decodes the body of gpuq.cmd.sched.archive:
// {"v":1,"job":"train-42","seq":1234,"retention":"168h0m0s"}.
func DecodeArchive(data []byte) (ledger.Archive, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Archive{}, decodeError("", "", "archive decision", err)
	}
	a := ledger.Archive{Job: f.token("job", "job id", true), Retention: f.duration("retention", true)}
	if seq := f.int64("seq", true); seq > 0 {
		a.Seq = uint64(seq)
	} else if len(f.errs) == 0 {
		f.bad("seq %d is not ≥ 1", seq)
	}
	if err := f.done("", a.Job, "archive decision", a); err != nil {
		return ledger.Archive{}, err
	}
	return a, nil
}

// EncodeArchive returns the message logging archive decision a.
func EncodeArchive(n subjects.Names, a ledger.Archive) (Message, error) {
	if err := errors.Join(subjects.CheckToken("job id", a.Job), a.Validate()); err != nil {
		return Message{}, err
	}
	return encode(n.Sched(subjects.SchedArchive), ArchiveMsgID(a.Job, a.Seq), struct {
		V         int    `json:"v"`
		Job       string `json:"job"`
		Seq       uint64 `json:"seq"`
		Retention string `json:"retention"`
	}{Version, a.Job, a.Seq, a.Retention.String()})
}

// ArchiveMsgID is the id of the scheduler's decision to archive job as of
// its record at seq: two decisions about the same record are one.
func ArchiveMsgID(job string, seq uint64) string {
	return "archive." + job + "." + strconv.FormatUint(seq, 10)
}

// History is the body of gpuq.history.<account>.<job>: the final record of
// an archived job, and when it was archived (the archive command's log
// sequence and time). Job is the ledger's record as the KV bucket held it.
type History struct {
	V          int         `json:"v"`
	Seq        uint64      `json:"seq"`
	ArchivedAt time.Time   `json:"archived_at"`
	Job        *ledger.Job `json:"job"`
}

// encodeHistory returns the history message of an archived job.
func encodeHistory(n subjects.Names, seq uint64, at time.Time, i int, e ledger.ArchivedJob) (Message, error) {
	if e.Job == nil {
		return Message{}, errors.New("encode history: no job")
	}
	if err := errors.Join(subjects.CheckToken("account", e.Job.Account), subjects.CheckToken("job id", e.Job.ID)); err != nil {
		return Message{}, fmt.Errorf("encode history: %w", err)
	}
	return encode(n.History(e.Job.Account, e.Job.ID), EffectMsgID(seq, i), History{V: Version, Seq: seq, ArchivedAt: at, Job: e.Job})
}

// DecodeHistory decodes the body of gpuq.history.<account>.<job> and checks
// the record as the ledger checks a stored one. subject, when not empty, is
// the subject it was read from: its account and job must be the record's.
func DecodeHistory(n subjects.Names, subject string, data []byte) (History, error) {
	var h History
	if err := unmarshalV1("history record", data, &h); err != nil {
		return History{}, err
	}
	if h.Job == nil {
		return History{}, errors.New("history record: no job")
	}
	if _, err := ledger.MarshalJob(h.Job); err != nil { // checks the record
		return History{}, fmt.Errorf("history record: %w", err)
	}
	if !h.Job.State.Terminal() {
		return History{}, fmt.Errorf("history record of job %s: state %s is not final", h.Job.ID, h.Job.State)
	}
	if subject != "" {
		account, job, err := n.ParseHistory(subject)
		if err != nil {
			return History{}, fmt.Errorf("history record: %w", err)
		}
		if account != h.Job.Account || job != h.Job.ID {
			return History{}, fmt.Errorf("history record on %s is of job %s of account %s", subject, h.Job.ID, h.Job.Account)
		}
	}
	return h, nil
}
