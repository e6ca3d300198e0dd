package main

import (
	"flag"
	"time"
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
			"Audit starts from a seal, and accounts that move money are sealed at least daily, so keep at least a few days more than you audit")
	fs.Int64Var(&o.retention.JournalMaxBytes, "journal-max-bytes", 0,
		"cap on the journal stream's bytes; when full the scheduler stops (it never drops an entry); 0 is no cap")
	fs.DurationVar(&o.retention.DispatchMaxAge, "orders-max-age", 7*24*time.Hour,
		"how long a dispatch or cancel order waits for its host to fetch it (GPUQ_DISPATCH)")
	fs.DurationVar(&o.retention.LogsMaxAge, "logs-max-age", 7*24*time.Hour, "how long job output is kept (GPUQ_LOGS)")
	fs.Int64Var(&o.retention.LogsMaxBytes, "logs-max-bytes", 10<<30, "cap on job output kept, oldest dropped first (GPUQ_LOGS)")
	fs.DurationVar(&o.retainApplied, "retain-applied", 24*time.Hour,
		"how long applied commands stay in the command log (GPUQ_CMD) before the leader trims them; never one past the checkpoint; negative keeps them all")
}
