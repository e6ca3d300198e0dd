package ledger_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// A job record stored before "held" was renamed "reserved" still decodes
// with its reservation, and is written back under the new name.
func TestJobRecordWithTheOldReservationName(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	j := &ledger.Job{ID: "j1", Account: "a", GPUs: 1, Cost: 5, Reserved: 5, Command: []string{"true"}, Walltime: time.Hour,
		MaxAttempts: 3, State: ledger.StatePending, SubmitSeq: 1, SubmittedAt: at, Seq: 1}
	data, err := ledger.MarshalJob(j)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"reserved":5`)) {
		t.Fatalf("the record %s does not name its reservation \"reserved\"", data)
	}
	old := bytes.Replace(data, []byte(`"reserved":5`), []byte(`"held":5`), 1)
	got, err := ledger.UnmarshalJob(old)
	if err != nil || got.Reserved != 5 {
		t.Fatalf("decode %s = %+v, %v; want the reservation of 5", old, got, err)
	}
}
