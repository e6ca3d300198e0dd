package main

import (
	"flag"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// retentionFlags adds the retention of every stream to the scheduler's
// flags. Each stream is set to them at every start of a scheduler (see
// natsbus.Setup), so the last scheduler started decides: give every
// scheduler of an installation the same ones.
func retentionFlags(fs *flag.FlagSet, o *schedulerOpts) {
	fs.DurationVar(&o.retention.EventsMaxAge, "events-max-age", 30*24*time.Hour,
		"how long job and account events are kept (GPUQ_EVENTS)")
	fs.DurationVar(&o.retention.JournalMaxAge, "journal-max-age", 0,
		"how long journal entries, the money record, are kept (GPUQ_JOURNAL); 0 keeps them for the installation's life. "+
			"Audit starts from a seal, and every account is sealed at least daily, so at least "+minJournalAge.String()+"; keep a few days more than you audit")
	fs.Int64Var(&o.retention.JournalMaxBytes, "journal-max-bytes", 0,
		"cap on the journal stream's bytes; when full the scheduler stops (it never drops an entry); 0 is no cap")
	fs.DurationVar(&o.retention.DispatchMaxAge, "orders-max-age", 7*24*time.Hour,
		"how long a dispatch or cancel order waits for its host to fetch it (GPUQ_DISPATCH)")
	fs.DurationVar(&o.retention.LogsMaxAge, "logs-max-age", 7*24*time.Hour, "how long job output is kept (GPUQ_LOGS)")
	fs.Int64Var(&o.retention.LogsMaxBytes, "logs-max-bytes", 10<<30, "cap on job output kept, oldest dropped first (GPUQ_LOGS)")
	fs.DurationVar(&o.retainApplied, "retain-applied", 24*time.Hour,
		"how long applied commands stay in the command log (GPUQ_CMD) before the leader trims them; never one past the checkpoint; negative keeps them all")
}

// minJournalAge is the shortest journal age limit a scheduler takes: every
// account's journal gets a seal about daily (ledger.SealInterval, then the
// decision's scan), so a journal kept this long always holds one, with a day
// to spare for a scheduler that was down.
const minJournalAge = 3 * ledger.SealInterval

// checkRetention refuses retention flags under which the installation would
// lose what it needs.
func checkRetention(o schedulerOpts) error {
	if a := o.retention.JournalMaxAge; a != 0 && a < minJournalAge {
		return usagef("--journal-max-age %v is too short: every account's journal is sealed about daily, and an audit needs its newest seal kept; give 0 (keep the journal for good) or at least %v", a, minJournalAge)
	}
	return nil
}
