package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// TestAuditSaysWhenTheSchedulerIsStuck stores a command on a real server
// where no scheduler folds: audit passes while the command is younger than
// --stuck-after, and fails, naming the command and its age, once it is
// older.
func TestAuditSaysWhenTheSchedulerIsStuck(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := natsbus.Setup(ctx, js, subjects.Default, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	audit := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"audit", "--nats", srv.URLs()}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := audit("--stuck-after", "1ns"); code != 0 || !strings.HasPrefix(out, "audit ok") {
		t.Fatalf("audit of an empty log: exit %d: %s", code, out)
	}
	msg, err := wire.EncodeSubmit(subjects.Default, ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 1, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, msg.Subject, msg.Data); err != nil {
		t.Fatal(err)
	}
	if code, out := audit(); code != 0 {
		t.Errorf("audit with a command younger than --stuck-after: exit %d: %s", code, out)
	}
	code, out := audit("--stuck-after", "1ns")
	if code != exitAudit || !strings.Contains(out, "the scheduler is stuck: command 1 (gpuq.cmd.submit.a)") || !strings.Contains(out, "checkpoint 0") {
		t.Errorf("audit of a stuck fold: exit %d:\n%s", code, out)
	}
	code, out = audit("--stuck-after", "1ns", "--output", "json")
	var rep auditReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitAudit || rep.Stuck == nil || rep.Stuck.Seq != 1 || rep.LogLast != 1 || rep.OK {
		t.Errorf("audit --output json: exit %d, %+v, %v:\n%s", code, rep, err, out)
	}
}
