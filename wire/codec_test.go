// The command codec is symmetric: for generated commands of every kind the
// log holds, EncodeCommand then DecodeCommand gives back the very command.
// Which kinds exist is read from the ledger's source (the types with an
// isCommand method), so a kind added there without a generator here fails
// the test instead of going untested.
package wire_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

var (
	genToken = rapid.StringMatching(`[A-Za-z0-9_-]{1,24}`)
	// genText is free text as a reason or a message: any valid UTF-8 but
	// NUL, escapes and all.
	genText = rapid.Custom(func(t *rapid.T) string {
		return strings.ReplaceAll(rapid.StringN(1, 40, -1).Draw(t, "text"), "\x00", "0")
	})
	// genName is a job's display name: printable text, empty for none.
	genName = rapid.Custom(func(t *rapid.T) string {
		return strings.Map(func(r rune) rune {
			if unicode.IsPrint(r) {
				return r
			}
			return 'x'
		}, rapid.StringN(0, 30, -1).Draw(t, "name")) // at most 120 bytes
	})
	genCredits = rapid.Custom(func(t *rapid.T) ledger.Credits {
		return ledger.Credits(rapid.Int64Range(0, int64(ledger.MaxCredits)).Draw(t, "credits"))
	})
	genDevice = rapid.StringMatching(`(GPU|MIG)-[0-9a-f-]{1,40}`)
	genUTC    = rapid.Custom(func(t *rapid.T) time.Time {
		// Within the years a Unix-nanosecond id can name.
		return time.Unix(0, rapid.Int64Range(0, 1<<62).Draw(t, "unix_ns")).UTC()
	})
)

// genCommands draws a valid command of each kind, by the name of its type.
var genCommands = map[string]*rapid.Generator[ledger.Command]{
	"Submit": rapid.Custom(func(t *rapid.T) ledger.Command {
		s := ledger.Submit{Account: genToken.Draw(t, "account"), ID: genToken.Draw(t, "id"),
			Priority:    rapid.IntRange(ledger.MinPriority, ledger.MaxPriority).Draw(t, "priority"),
			GPUs:        rapid.IntRange(1, ledger.MaxJobGPUs).Draw(t, "gpus"),
			Command:     append([]string{genToken.Draw(t, "program")}, rapid.SliceOfN(genText, 0, 4).Draw(t, "args")...),
			Walltime:    time.Duration(rapid.Int64Range(0, int64(ledger.MaxWalltime)).Draw(t, "walltime")),
			MaxAttempts: rapid.IntRange(0, ledger.MaxMaxAttempts).Draw(t, "max_attempts"),
			Hold:        rapid.Bool().Draw(t, "hold"),
		}
		s.Name = genName.Draw(t, "name")
		if rapid.Bool().Draw(t, "in_array") {
			s.ArrayID, s.ArrayIndex = genToken.Draw(t, "array_id"), rapid.IntRange(0, ledger.MaxArrayIndex).Draw(t, "array_index")
		}
		s.Workdir = rapid.SampledFrom([]string{"", "/", "/data/run-7", "/home/ana/é"}).Draw(t, "workdir")
		s.GPUModel = rapid.SampledFrom([]string{"", "NVIDIA H100 80GB HBM3", "NVIDIA H200 141GB HBM3e"}).Draw(t, "gpu_model")
		if deps := rapid.SliceOfNDistinct(genToken, 0, 4, rapid.ID[string]).Draw(t, "deps"); len(deps) > 0 {
			k := rapid.IntRange(0, len(deps)).Draw(t, "afterok")
			s.After, s.AfterAny = deps[:k:k], deps[k:] // no list is empty: an empty one is none
			if len(s.After) == 0 {
				s.After = nil
			}
			if len(s.AfterAny) == 0 {
				s.AfterAny = nil
			}
			if slices.Contains(deps, s.ID) {
				s.After, s.AfterAny = nil, nil // a job cannot depend on itself
			}
		}
		if s.Metered = rapid.Bool().Draw(t, "metered"); !s.Metered {
			s.Cost = genCredits.Draw(t, "cost")
		}
		if env := rapid.MapOfN(rapid.StringMatching(`[A-Z][A-Z0-9_]{0,8}`), genText, 0, 3).Draw(t, "env"); len(env) > 0 {
			s.Env = env // an empty env is none
		}
		return s
	}),
	"Cancel": rapid.Custom(func(t *rapid.T) ledger.Command {
		return ledger.Cancel{Account: genToken.Draw(t, "account"), Job: genToken.Draw(t, "job")}
	}),
	"Modify": rapid.Custom(func(t *rapid.T) ledger.Command {
		m := ledger.Modify{Account: genToken.Draw(t, "account"), Job: genToken.Draw(t, "job"),
			Op: rapid.SampledFrom([]ledger.ModifyOp{ledger.OpHold, ledger.OpRelease, ledger.OpPriority}).Draw(t, "op")}
		if m.Op == ledger.OpPriority {
			m.Priority = rapid.IntRange(ledger.MinPriority, ledger.MaxPriority).Draw(t, "priority")
		}
		return m
	}),
	"Admin": rapid.Custom(func(t *rapid.T) ledger.Command {
		a := ledger.Admin{Account: genToken.Draw(t, "account"), ID: genToken.Draw(t, "id"),
			Op: rapid.SampledFrom([]ledger.AdminOp{ledger.OpCreate, ledger.OpGrant, ledger.OpLimits, ledger.OpRefill, ledger.OpWeight}).Draw(t, "op")}
		switch a.Op {
		case ledger.OpCreate:
			a.Balance = genCredits.Draw(t, "balance")
		case ledger.OpGrant:
			a.Amount = genCredits.Filter(func(c ledger.Credits) bool { return c != 0 }).Draw(t, "amount")
			if rapid.Bool().Draw(t, "take") {
				a.Amount = -a.Amount
			}
		case ledger.OpLimits:
			a.Limits = ledger.Limits{MaxRunningJobs: rapid.IntRange(0, ledger.MaxLimit).Draw(t, "max_running_jobs"),
				MaxRunningGPUs: rapid.IntRange(0, ledger.MaxLimit).Draw(t, "max_running_gpus")}
		case ledger.OpRefill:
			a.RatePerHour, a.Cap = genCredits.Draw(t, "rate_per_hour"), genCredits.Draw(t, "cap")
			if a.RatePerHour > 0 && a.Cap == 0 {
				a.Cap = 1
			}
		case ledger.OpWeight:
			a.Weight = rapid.IntRange(1, ledger.MaxWeight).Draw(t, "weight")
		}
		return a
	}),
	"Report": rapid.Custom(func(t *rapid.T) ledger.Command {
		r := ledger.Report{Host: genToken.Draw(t, "host"), Job: genToken.Draw(t, "job"), Attempt: rapid.IntRange(1, 1<<20).Draw(t, "attempt"),
			Type: rapid.SampledFrom([]ledger.ReportType{ledger.ReportStarted, ledger.ReportDone, ledger.ReportRejected}).Draw(t, "type")}
		switch r.Type {
		case ledger.ReportStarted:
			r.Devices = rapid.SliceOfNDistinct(genDevice, 1, 8, rapid.ID).Draw(t, "devices")
			r.Model = rapid.SampledFrom([]string{"", "NVIDIA H200 141GB HBM3e"}).Draw(t, "model")
		case ledger.ReportDone:
			r.ExitCode = rapid.IntRange(-1<<31, 1<<31-1).Draw(t, "exit_code")
			r.Runtime = time.Duration(rapid.Int64Range(0, int64(2*ledger.MaxWalltime/time.Millisecond)).Draw(t, "runtime_ms")) * time.Millisecond
			r.Infra = rapid.SampledFrom([]string{"", "Xid 79 on GPU-x"}).Draw(t, "infra")
		case ledger.ReportRejected:
			r.Reason, r.Busy = genText.Draw(t, "reason"), rapid.Bool().Draw(t, "busy")
		}
		return r
	}),
	"Dispatch": rapid.Custom(func(t *rapid.T) ledger.Command {
		return ledger.Dispatch{Job: genToken.Draw(t, "job"), Attempt: rapid.IntRange(1, 1<<20).Draw(t, "attempt"), Host: genToken.Draw(t, "host")}
	}),
	"Lost": rapid.Custom(func(t *rapid.T) ledger.Command {
		return ledger.Lost{Job: genToken.Draw(t, "job"), Attempt: rapid.IntRange(1, 1<<20).Draw(t, "attempt"), Reason: genText.Draw(t, "reason")}
	}),
	"Unplaceable": rapid.Custom(func(t *rapid.T) ledger.Command {
		return ledger.Unplaceable{Job: genToken.Draw(t, "job"), Message: genText.Draw(t, "message")}
	}),
	"Admit": rapid.Custom(func(t *rapid.T) ledger.Command {
		return ledger.Admit{Account: genToken.Draw(t, "account"), Due: genUTC.Draw(t, "due")}
	}),
	"Archive": rapid.Custom(func(t *rapid.T) ledger.Command {
		return ledger.Archive{Job: genToken.Draw(t, "job"), Seq: rapid.Uint64Range(1, 1<<62).Draw(t, "seq"),
			Retention: time.Duration(rapid.Int64Range(1, int64(ledger.MaxRetention)).Draw(t, "retention"))}
	}),
	"Seal": rapid.Custom(func(t *rapid.T) ledger.Command {
		return ledger.Seal{Account: genToken.Draw(t, "account"), After: rapid.Uint64Range(0, 1<<62).Draw(t, "after")}
	}),
	"SetPricing": rapid.Custom(func(t *rapid.T) ledger.Command {
		p := ledger.SetPricing{ID: genToken.Draw(t, "id"), Default: genCredits.Draw(t, "default"),
			FailurePercent: rapid.IntRange(0, 100).Draw(t, "failure_percent"),
			FixedCost:      rapid.SampledFrom([]ledger.FixedCostPolicy{ledger.FixedCostAny, ledger.FixedCostFloor, ledger.FixedCostRefused}).Draw(t, "fixed_cost")}
		if m := rapid.MapOfN(rapid.StringMatching(`NVIDIA [A-Z][0-9]{2,3}( [0-9]+GB)?`), genCredits, 0, 4).Draw(t, "per_gpu_hour"); len(m) > 0 {
			p.PerGPUHour = m // an empty table of models is none
		}
		return p
	}),
}

// notPublished are the command kinds that never travel: Invalid stands in
// the fold for an entry that could not be decoded.
var notPublished = []string{"Invalid"}

func TestEncodeCommandRoundTrip(t *testing.T) {
	t.Parallel()
	for _, kind := range commandKinds(t) {
		gen, ok := genCommands[kind]
		switch {
		case slices.Contains(notPublished, kind):
			continue
		case !ok:
			t.Errorf("ledger.%s is a command with no generator here: add one, and its case to wire.EncodeCommand and DecodeCommand", kind)
			continue
		}
		// Not in parallel: the generators are shared, and rapid's lazily
		// built generator names race when two checks draw from one.
		t.Run(kind, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				c := gen.Draw(t, "command")
				if err := c.(interface{ Validate() error }).Validate(); err != nil {
					t.Fatalf("the generator drew an invalid %T: %v", c, err) // a bug of the test
				}
				msg, err := wire.EncodeCommand(n, c)
				if err != nil {
					t.Fatalf("EncodeCommand(%+v): %v", c, err)
				}
				got, err := wire.DecodeCommand(n, msg.Subject, msg.Data)
				if err != nil {
					t.Fatalf("DecodeCommand(%s, %s) of EncodeCommand(%+v): %v", msg.Subject, msg.Data, c, err)
				}
				if !reflect.DeepEqual(got, c) {
					t.Fatalf("EncodeCommand then DecodeCommand changed\n%#v\ninto\n%#v\n(body %s)", c, got, msg.Data)
				}
				if msg.MsgID == "" {
					t.Fatalf("EncodeCommand(%+v) gave no de-duplication id", c)
				}
			})
		})
	}
}

func TestEncodeCommandRefusesInvalid(t *testing.T) {
	t.Parallel()
	if _, err := wire.EncodeCommand(n, ledger.Invalid{Account: "a", Reason: ledger.ReasonInvalid, Message: "x"}); err == nil {
		t.Error("EncodeCommand(Invalid) succeeded; an invalid stand-in is never published")
	}
	for _, c := range []ledger.Command{
		ledger.Dispatch{Job: "j", Attempt: 0, Host: "h"},
		ledger.Admit{Account: "a.b"},
		ledger.Archive{Job: "j", Seq: 0, Retention: time.Hour},
		ledger.SetPricing{ID: "p", FailurePercent: 101},
	} {
		if msg, err := wire.EncodeCommand(n, c); err == nil {
			t.Errorf("EncodeCommand(%+v) = %s, want an error", c, msg.Data)
		}
	}
}

// commandKinds returns the names of the ledger's command types: those with
// an isCommand method, read from the package's source.
func commandKinds(t *testing.T) []string {
	t.Helper()
	kinds := methodReceivers(t, "isCommand")
	if len(kinds) < 10 {
		t.Fatalf("found only command kinds %v in the ledger's source", kinds)
	}
	return kinds
}
