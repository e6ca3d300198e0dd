package ledger

import "time"

// Limits on what one command may ask for. A command beyond a limit is
// rejected with a message naming the limit, and with [ReasonTooLarge] when
// the limit is a size, [ReasonInvalid] otherwise. Sizes of free-form text
// are of its JSON encoding where they say so (see [EncodedLen]), and of its
// bytes otherwise.
const (
	// MaxJobGPUs is the most GPUs one job may ask for.
	MaxJobGPUs = 256
	// MinPriority and MaxPriority bound a job's priority; higher runs first.
	MinPriority = -1000
	MaxPriority = 1000
	// MaxCommandArgs bounds a job's arguments, and MaxCommandBytes the JSON
	// encoding of its command line as an array, escapes included.
	MaxCommandArgs  = 4096
	MaxCommandBytes = 128 << 10
	// MaxEnvVars bounds a job's extra environment variables, and
	// MaxEnvBytes the JSON encoding of them as an object, escapes included.
	MaxEnvVars  = 256
	MaxEnvBytes = 64 << 10
	// MaxWalltime is the longest walltime a job may ask for.
	MaxWalltime = 30 * 24 * time.Hour
	// DefaultWalltime is a job's walltime when the submission names none.
	DefaultWalltime = time.Hour
	// DefaultMaxAttempts is a job's max_attempts when the submission names none.
	DefaultMaxAttempts = 3
	// MaxMaxAttempts bounds max_attempts.
	MaxMaxAttempts = 10
	// MaxWeight bounds an account's fair-share weight; the default weight is 1.
	MaxWeight = 10000
	// MaxLimit bounds an account's max_running_jobs and max_running_gpus.
	MaxLimit = 1 << 20
	// MaxRecentOps is how many admin op ids an account remembers for
	// idempotency beyond the stream's duplicate window.
	MaxRecentOps = 64
	// MaxReasonBytes bounds the bytes of a reason a worker or the
	// scheduler gives; the messages the fold builds from it are cut to
	// [MaxMessageBytes].
	MaxReasonBytes = 1024
	// MaxDeviceBytes bounds one device id (a GPU or MIG UUID), printable
	// ASCII that JSON stores as is.
	MaxDeviceBytes = 128
	// MaxModelBytes bounds a GPU model name, as a worker reports it and as
	// the price table names it.
	MaxModelBytes = 128
	// MaxPricedModels bounds the models the price table names.
	MaxPricedModels = 256
	// MaxHeldJobs bounds the jobs an account may have held at once.
	MaxHeldJobs = 1000
	// MaxBusyRefusals is how many busy refusals of one job (a worker that
	// found the GPUs it was sent to taken, [Report.Busy]) are requeued
	// without spending an attempt. Past it, a busy refusal counts as an
	// ordinary worker rejection, so no job is retried forever and its
	// record of attempts stays bounded.
	MaxBusyRefusals = 20
	// MaxNameBytes bounds a job's display name (printable text).
	MaxNameBytes = 128
	// MaxWorkdirBytes bounds a job's working directory, as Linux bounds a
	// path (PATH_MAX).
	MaxWorkdirBytes = 4096
	// MaxArrayIndex bounds the index of a job array's task, and
	// MaxArrayTasks the tasks one array submission may expand to.
	MaxArrayIndex = 999_999
	MaxArrayTasks = 1000
	// MaxDependencies bounds the jobs one submission may wait for, after
	// and after_any together.
	MaxDependencies = 32
)
