// Round trips of the archive decision and the history record, and the
// bodies each decoder refuses.
package wire_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

func TestArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	n := subjects.Default
	a := ledger.Archive{Job: "train-42", Seq: 1234, Retention: 7 * 24 * time.Hour}
	msg, err := wire.EncodeArchive(n, a)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "gpuq.cmd.sched.archive" || msg.MsgID != "archive.train-42.1234" {
		t.Errorf("subject %q id %q", msg.Subject, msg.MsgID)
	}
	got, err := wire.DecodeCommand(n, msg.Subject, msg.Data)
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Errorf("DecodeCommand = %+v, %v; want %+v", got, err, a)
	}
	for _, body := range []string{
		`{"v":1,"job":"j","seq":0,"retention":"1h"}`,
		`{"v":1,"job":"j","seq":-4,"retention":"1h"}`,
		`{"v":1,"job":"j","seq":5,"retention":"-1h"}`,
		`{"v":1,"job":"j","seq":5}`,
		`{"v":1,"job":"a.b","seq":5,"retention":"1h"}`,
	} {
		var de *wire.DecodeError
		if _, err := wire.DecodeCommand(n, "gpuq.cmd.sched.archive", []byte(body)); !errors.As(err, &de) {
			t.Errorf("DecodeCommand(%s) = %v, want a *DecodeError", body, err)
		}
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	t.Parallel()
	n := subjects.Default
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	code := 0
	j := &ledger.Job{ID: "train-42", Account: "vision", GPUs: 1, Cost: 10, Charged: 10, Command: []string{"true"},
		Walltime: time.Hour, MaxAttempts: 3, State: ledger.StateSucceeded, Attempt: 1, SubmitSeq: 3, SubmittedAt: at, Seq: 9, JobOutcome: &ledger.JobOutcome{Host: "h1", ExitCode: &code, EndedAt: at.Add(time.Minute)}}
	msg, err := wire.EncodeEffect(n, 40, at.Add(time.Hour), 1, ledger.ArchivedJob{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "gpuq.history.vision.train-42" || msg.MsgID != wire.EffectMsgID(40, 1) {
		t.Errorf("subject %q id %q", msg.Subject, msg.MsgID)
	}
	h, err := wire.DecodeHistory(n, msg.Subject, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != 40 || !h.ArchivedAt.Equal(at.Add(time.Hour)) || !reflect.DeepEqual(h.Job, j) {
		t.Errorf("DecodeHistory = %+v, want seq 40 at %v of %+v", h, at.Add(time.Hour), j)
	}
	if _, err := wire.DecodeHistory(n, "gpuq.history.nlp.train-42", msg.Data); err == nil || !strings.Contains(err.Error(), "account vision") {
		t.Errorf("a record under another account's subject: %v, want refused", err)
	}
	running := *j
	running.State, running.EditOutcome().ExitCode = ledger.StateRunning, nil
	bad, _ := wire.EncodeEffect(n, 41, at, 0, ledger.ArchivedJob{Job: &running})
	if _, err := wire.DecodeHistory(n, "", bad.Data); err == nil {
		t.Error("a history record of a running job decoded")
	}
}
