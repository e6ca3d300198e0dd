package scheduler

import (
	"log/slog"

	"github.com/gpuq/gpuq/ledger"
)

// logRejections logs, at info, each command of res that the fold refused:
// a rejected submission, admin or configuration command, or one that could
// not be decoded or addressed (invalid). Every other command logs nothing,
// so the cost on the fold's hot path is one pass over res.Effects.
func (t *term) logRejections(cmd ledger.Command, seq uint64, res ledger.Result) {
	for _, eff := range res.Effects {
		var account, job, opID string
		var reason ledger.Reason
		var message string
		switch ev := eff.(type) {
		case ledger.JobEvent:
			if ev.Type != ledger.EventRejected {
				continue
			}
			account, job, reason, message = ev.Account, ev.Job, ev.Reason, ev.Message
		case ledger.AccountEvent:
			if ev.Type != ledger.EventRejected {
				continue
			}
			account, opID, reason, message = ev.Account, ev.OpID, ev.Reason, ev.Message
		case ledger.ConfigEvent:
			if ev.Type != ledger.EventRejected {
				continue
			}
			opID, reason, message = ev.OpID, ev.Reason, ev.Message
		case ledger.InvalidEvent:
			account, job, reason, message = ev.Account, ev.Job, ev.Reason, ev.Message
		default:
			continue
		}
		attrs := []any{slog.String("kind", string(cmd.Kind())), slog.Uint64("seq", seq), slog.String("reason", string(reason)),
			slog.String("message", message)}
		if account != "" {
			attrs = append(attrs, slog.String("account", account))
		}
		if job != "" {
			attrs = append(attrs, slog.String("job_id", job))
		}
		if opID != "" {
			attrs = append(attrs, slog.String("op_id", opID))
		}
		t.s.log.Info("command rejected", attrs...)
	}
}
