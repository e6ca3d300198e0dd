package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// TestAuditReadsFromSeals runs gpuq dev and grants account demo (created
// with one entry) 998 times, then once more (its journal reaches SealEvery
// entries and is sealed at entry 1001), then 50 times, waiting for the
// scheduler to fold and publish each batch. gpuq audit then reads demo's
// journal from its seal's command on: 52 of 1051 messages. An entry removed
// before the seal is found by --full only; a cut before the seal audits
// clean both ways; an entry removed after it is found by the default audit.
func TestAuditReadsFromSeals(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	audit := func(args ...string) (auditReport, result) {
		t.Helper()
		base := []string{"audit", "--seal-margin", "0", "--output", "json"}
		if slices.Contains(args, "--full") {
			base = []string{"audit", "--output", "json"} // --full reads from the start: no margin
		}
		r := d.gpuq(append(base, args...)...)
		var rep auditReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("gpuq audit %v: exit %d: %q %s: %v", args, r.code, r.stdout, r.stderr, err)
		}
		return rep, r
	}
	grants := 0
	grant := func(k int) {
		t.Helper()
		var last uint64
		for range k {
			grants++
			msg, err := wire.EncodeAdmin(subjects.Default, ledger.Admin{Account: "demo", ID: fmt.Sprintf("g%d", grants), Op: ledger.OpGrant, Amount: 1})
			if err != nil {
				t.Fatal(err)
			}
			m := nats.NewMsg(msg.Subject)
			m.Data = msg.Data
			m.Header.Set(subjects.MsgIDHeader, msg.MsgID)
			ack, err := js.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			last = ack.Sequence
		}
		// Folded and every entry published: audit is clean up to it.
		deadline := time.Now().Add(60 * time.Second)
		for {
			rep, _ := audit("--full")
			if rep.Checkpoint >= last && rep.OK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the scheduler did not fold command %d in 60s: %+v", last, rep)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	grant(ledger.SealEvery - 2)
	grant(1)
	grant(50)

	rep, r := audit()
	if !rep.OK || rep.From != "seals" || rep.Read != 52 || rep.Stored != 1051 || rep.Entries != 51 || len(rep.Whole) != 0 {
		t.Fatalf("audit: exit %d: %+v", r.code, rep)
	}
	full, _ := audit("--full")
	if !full.OK || full.From != "start" || full.Read != 1051 || full.Entries != 1051 {
		t.Fatalf("audit --full: %+v", full)
	}
	if out := d.ok("audit", "--seal-margin", "0"); !strings.Contains(out, "audit ok: 1 accounts agree with 51 journal entries") || !strings.Contains(out, "(from seals: 52 of 1051 journal messages read)") {
		t.Errorf("audit says: %s", out)
	}
	if out := d.ok("audit", "--full"); !strings.Contains(out, "(in full: 1051 journal messages read)") {
		t.Errorf("audit --full says: %s", out)
	}

	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Journal(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	msg := map[uint64]uint64{} // position → stream sequence
	for _, e := range j.Chained {
		msg[e.N] = e.Msg
	}
	stream, err := js.Stream(ctx, subjects.Default.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, msg[500]); err != nil {
		t.Fatal(err)
	}
	if rep, r := audit(); !rep.OK || rep.Read != 52 {
		t.Errorf("audit with entry 500, before the seal, removed: exit %d: %+v", r.code, rep)
	}
	if rep, r := audit("--full"); rep.OK || r.code != exitAudit || !strings.Contains(strings.Join(rep.Differences, "\n"), "account demo: entry 500 is missing, before entry 501") {
		t.Errorf("audit --full with entry 500 removed: exit %d: %+v", r.code, rep)
	}

	// Cut up to the seal (entry 1000 goes too): both audits are clean.
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(msg[ledger.SealEvery+1])); err != nil {
		t.Fatal(err)
	}
	if rep, r := audit(); !rep.OK || rep.Read != 51 || rep.Stored != 51 {
		t.Errorf("audit after a cut before the seal: exit %d: %+v", r.code, rep)
	}
	if rep, r := audit("--full"); !rep.OK || rep.Read != 51 {
		t.Errorf("audit --full after a cut before the seal: exit %d: %+v", r.code, rep)
	}

	if err := stream.DeleteMsg(ctx, msg[1030]); err != nil {
		t.Fatal(err)
	}
	if rep, r := audit(); rep.OK || r.code != exitAudit || !strings.Contains(strings.Join(rep.Differences, "\n"), "account demo: entry 1030 is missing, before entry 1031") {
		t.Errorf("audit with entry 1030, after the seal, removed: exit %d: %+v", r.code, rep)
	}
	if r := d.gpuq("audit", "--seal-margin", "-1s"); r.code != exitUsage || !strings.Contains(r.stderr, "--seal-margin -1s: want 0 or more") {
		t.Errorf("audit --seal-margin -1s: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}
