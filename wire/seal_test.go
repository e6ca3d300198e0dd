package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

func TestSealDecisionRoundTrips(t *testing.T) {
	in := ledger.Seal{Account: "interns", After: 1000}
	msg, err := wire.EncodeSeal(subjects.Default, in)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "gpuq.cmd.sched.seal" || msg.MsgID != "seal.interns.1000" {
		t.Errorf("subject %q, id %q", msg.Subject, msg.MsgID)
	}
	cmd, err := wire.DecodeCommand(subjects.Default, msg.Subject, msg.Data)
	if err != nil || cmd != in {
		t.Fatalf("decode %s = %#v, %v; want %#v", msg.Data, cmd, err, in)
	}
	for _, body := range []string{`{"v":1}`, `{"v":1,"account":"a.b"}`, `{"v":1,"account":"a","after":-1}`} {
		_, err := wire.DecodeCommand(subjects.Default, msg.Subject, []byte(body))
		var de *wire.DecodeError
		if !errors.As(err, &de) || de.Reason != ledger.ReasonInvalid || !strings.Contains(err.Error(), "seal decision") {
			t.Errorf("decode %s: %v, want an invalid seal decision", body, err)
		}
	}
}
