package ledger

import "fmt"

// Running is what an account runs at once, or will once decisions made but
// not yet applied take effect: jobs, and the GPUs of those jobs.
type Running struct {
	Jobs int
	GPUs int
}

// CapBlock is one of an account's caps ([Limits]) keeping a job from
// starting.
type CapBlock struct {
	Reason  Reason // ReasonMaxRunningJobs or ReasonMaxRunningGPUs
	Account string
	Running Running // what the account runs, decisions not yet applied included
	GPUs    int     // the GPUs the job needs
	Max     int     // the cap
}

// CapBlocks returns the caps of account a that keep one more job of gpus
// GPUs from starting while a runs what the ledger records
// ([Account.RunningJobs], [Account.RunningGPUs]) plus decided, the jobs the
// caller decided to start and the fold has not applied yet: the running-jobs
// cap first, then the GPU cap. Nil means the caps allow the job; a nil
// account has no caps.
//
// It is the one statement of the rule: the fold refuses a dispatch with the
// first block's reason, the scheduler starts no job it blocks (and sets the
// whole account aside for a pass at the running-jobs cap), and the
// scheduler's explanation of a waiting job lists every block.
func CapBlocks(a *Account, decided Running, gpus int) []CapBlock {
	if a == nil {
		return nil
	}
	r := Running{Jobs: a.RunningJobs + decided.Jobs, GPUs: a.RunningGPUs + decided.GPUs}
	var out []CapBlock
	if m := a.Limits.MaxRunningJobs; m > 0 && r.Jobs >= m {
		out = append(out, CapBlock{Reason: ReasonMaxRunningJobs, Account: a.ID, Running: r, GPUs: gpus, Max: m})
	}
	if m := a.Limits.MaxRunningGPUs; m > 0 && r.GPUs+gpus > m {
		out = append(out, CapBlock{Reason: ReasonMaxRunningGPUs, Account: a.ID, Running: r, GPUs: gpus, Max: m})
	}
	return out
}

// Message says what the cap is and how far the account is from it. It is
// built only when asked for: the scheduler checks caps on its hot path and
// needs the reason alone.
func (b CapBlock) Message() string {
	switch b.Reason {
	case ReasonMaxRunningJobs:
		if b.Running.Jobs > b.Max {
			return fmt.Sprintf("account %s already runs %d jobs, more than its cap of %d", b.Account, b.Running.Jobs, b.Max)
		}
		return fmt.Sprintf("account %s already runs %d jobs, its cap", b.Account, b.Running.Jobs)
	case ReasonMaxRunningGPUs:
		if b.GPUs > b.Max {
			return fmt.Sprintf("the job needs %d GPUs, more than account %s's cap of %d: it cannot start until the cap is raised", b.GPUs, b.Account, b.Max)
		}
		return fmt.Sprintf("account %s runs %d GPUs; %d more would pass its cap of %d", b.Account, b.Running.GPUs, b.GPUs, b.Max)
	}
	return fmt.Sprintf("account %s is at a cap (%s %d)", b.Account, b.Reason, b.Max)
}
