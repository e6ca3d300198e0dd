package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// BenchmarkAuditJournal measures an audit (read the journal from a real
// server on file storage, verify every chain, recompute the books) of a
// journal of 10,000, 100,000 and 1,000,000 entries (not with -short) over
// 10 accounts (each sealed every ledger.SealEvery entries), and of 10,000
// entries over 1,000 accounts (none sealed: the read from seals takes each
// from its creation, and costs a consumer per account), read whole (gpuq
// audit --full) and from the seals (gpuq audit). It reports the journal
// messages read per audit.
//
//	go test -run XXX -bench AuditJournal -benchtime 3x ./internal/natsbus/
func BenchmarkAuditJournal(b *testing.B) {
	for _, c := range []struct{ size, accounts int }{{10_000, 10}, {100_000, 10}, {1_000_000, 10}, {10_000, 1000}} {
		size, accounts := c.size, c.accounts
		if size > 100_000 && testing.Short() {
			continue
		}
		_, js := natstest.Start(b).JetStream(b)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		b.Cleanup(cancel)
		n := subjects.Default
		if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
			b.Fatal(err)
		}
		s := ledger.New()
		seq := uint64(0)
		apply := func(c ledger.Command) {
			seq++
			at := time.Now()
			res := s.Apply(c, seq, at)
			for i, e := range res.Effects {
				if _, ok := e.(ledger.Entry); !ok {
					continue
				}
				msg, err := wire.EncodeEffect(n, seq, at, i, e)
				if err != nil {
					b.Fatal(err)
				}
				m := nats.NewMsg(msg.Subject)
				m.Data = msg.Data
				m.Header.Set(subjects.MsgIDHeader, msg.MsgID)
				if _, err := js.PublishMsgAsync(m); err != nil {
					b.Fatal(err)
				}
			}
		}
		for a := range accounts {
			apply(ledger.Admin{Account: fmt.Sprintf("a%d", a), ID: "create", Op: ledger.OpCreate, Balance: 10})
		}
		for i := range size - accounts {
			// Sealing adds entries: stop at size.
			if seq >= uint64(size) {
				break
			}
			apply(ledger.Admin{Account: fmt.Sprintf("a%d", i%accounts), ID: fmt.Sprintf("g%d", i), Op: ledger.OpGrant, Amount: 1})
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal("the journal was not stored in time")
		}
		for _, mode := range []string{"full", "seals"} {
			b.Run(fmt.Sprintf("entries=%d/accounts=%d/%s", size, accounts, mode), func(b *testing.B) {
				var read uint64
				for b.Loop() {
					var j natsbus.Journal
					var err error
					if mode == "full" {
						j, err = natsbus.ReadJournal(ctx, js, n)
					} else {
						j, err = natsbus.ReadJournalFromSeals(ctx, js, n, s, s.Seq, 0)
					}
					if err != nil {
						b.Fatal(err)
					}
					if _, errs := ledger.AuditJournal(s, s.Seq, j.Chained, j.Legacy); len(errs) > 0 || len(j.Bad) > 0 {
						b.Fatalf("audit: %d differences (%v), %d bad messages (%v)", len(errs), errors.Join(errs...), len(j.Bad), j.Bad)
					}
					read = j.Read
				}
				b.ReportMetric(float64(read), "msgs/op")
			})
		}
	}
}
