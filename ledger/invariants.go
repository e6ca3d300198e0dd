package ledger

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// CheckInvariants checks the whole ledger and returns every broken invariant
// it finds, each wrapping [ErrInvariant]:
//
//   - every account: 0 ≤ reserved ≤ balance ≤ MaxCredits, a weight ≥ 1, and
//     limits in range;
//   - every account's reserved equals the credits held by its jobs in
//     pending, dispatched or running, and its running jobs and GPUs equal
//     those of its jobs in dispatched or running;
//   - every job is in exactly one known state, holds its cost while active
//     and nothing otherwise, is charged at most its cost (a fixed-cost job
//     exactly its cost on success and nothing otherwise), and belongs to an
//     existing account unless rejected, and has no more failures and busy
//     refusals than attempts, nor more attempts recorded than those allow;
//   - every account counts in Waiting exactly its jobs waiting on a
//     dependency, and only a waiting job waits on one or is paused;
//   - a price table exists if a metered job is pending, dispatched or
//     running, and is in range.
//
// It costs O(accounts + jobs); [State.Apply] checks only what it touched.
func (s *State) CheckInvariants() error {
	var errs []error
	type sums struct {
		held       Credits
		jobs, gpus int
		waiting    int
	}
	per := make(map[string]*sums, len(s.Accounts))
	held := map[string][]*Job{}
	for id, a := range s.Accounts {
		if a.ID != id {
			errs = append(errs, brokenf("account stored under %q has id %q", id, a.ID))
		}
		if err := a.check(); err != nil {
			errs = append(errs, fmt.Errorf("account %s: %w", id, err))
		}
		per[id] = &sums{}
	}
	for id, j := range s.Jobs {
		if j.ID != id {
			errs = append(errs, brokenf("job stored under %q has id %q", id, j.ID))
		}
		if err := j.check(); err != nil {
			errs = append(errs, fmt.Errorf("job %s: %w", id, err))
		}
		if j.State == StateRejected {
			continue
		}
		if j.State == StateHeld {
			held[j.Account] = append(held[j.Account], j)
		}
		sum := per[j.Account]
		if sum == nil {
			errs = append(errs, brokenf("job %s (%s) belongs to account %q, which does not exist", id, j.State, j.Account))
			continue
		}
		if j.State.Active() {
			sum.held += j.Reserved
			if j.Metered && s.Pricing == nil {
				errs = append(errs, brokenf("metered job %s is %s but there is no price table to charge it by", id, j.State))
			}
		}
		if j.State.OnHost() {
			sum.jobs++
			sum.gpus += j.GPUs
		}
		if len(j.WaitingOn()) > 0 {
			sum.waiting++
		}
	}
	for id, a := range s.Accounts {
		jobs := held[id]
		sort.Slice(jobs, func(i, k int) bool { return jobs[i].SubmitSeq < jobs[k].SubmitSeq })
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.ID
		}
		if !slices.Equal(ids, a.HeldJobs) {
			errs = append(errs, brokenf("account %s lists held jobs %v; its held jobs in submit order are %v", id, a.HeldJobs, ids))
		}
	}
	if s.Pricing != nil {
		if err := s.Pricing.check(); err != nil {
			errs = append(errs, brokenf("the price table is out of range: %v", err))
		}
	}
	for id, sum := range per {
		a := s.Accounts[id]
		if a.Reserved != sum.held {
			errs = append(errs, brokenf("account %s reserves %d but its unfinished jobs hold %d", id, a.Reserved, sum.held))
		}
		if a.RunningJobs != sum.jobs || a.RunningGPUs != sum.gpus {
			errs = append(errs, brokenf("account %s counts %d running jobs on %d GPUs, its jobs say %d on %d",
				id, a.RunningJobs, a.RunningGPUs, sum.jobs, sum.gpus))
		}
		if a.Waiting != sum.waiting {
			errs = append(errs, brokenf("account %s counts %d jobs waiting on a dependency, its jobs say %d", id, a.Waiting, sum.waiting))
		}
	}
	sort.Slice(errs, func(i, k int) bool { return errs[i].Error() < errs[k].Error() })
	return errors.Join(errs...)
}

func brokenf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvariant)
}

// check reports the first broken invariant of a alone.
func (a *Account) check() error {
	switch {
	case a.ID == "":
		return brokenf("account has no id")
	case a.Reserved < 0:
		return brokenf("reserved %d is negative", a.Reserved)
	case a.Balance < a.Reserved:
		return brokenf("balance %d is below reserved %d", a.Balance, a.Reserved)
	case a.Balance > MaxCredits:
		return brokenf("balance %d is above the maximum %d", a.Balance, MaxCredits)
	case a.RunningJobs < 0 || a.RunningGPUs < 0:
		return brokenf("running counts %d jobs, %d GPUs are negative", a.RunningJobs, a.RunningGPUs)
	case a.Weight < 1 || a.Weight > MaxWeight:
		return brokenf("weight %d is out of range", a.Weight)
	case a.Limits.MaxRunningJobs < 0 || a.Limits.MaxRunningGPUs < 0:
		return brokenf("limits %+v are negative", a.Limits)
	case !inRange(a.Refill.RatePerHour) || !inRange(a.Refill.Cap):
		return brokenf("refill %+v is out of range", a.Refill)
	case len(a.RecentOps) > MaxRecentOps:
		return brokenf("%d recent ops, more than %d", len(a.RecentOps), MaxRecentOps)
	case len(a.HeldJobs) > MaxHeldJobs:
		return brokenf("%d held jobs, more than %d", len(a.HeldJobs), MaxHeldJobs)
	}
	return nil
}

// check reports the first broken invariant of j alone.
func (j *Job) check() error {
	if err := j.checkWaits(); err != nil {
		return err
	}
	switch j.State {
	case StatePending, StateDispatched, StateRunning:
		if j.Reserved != j.Cost {
			return brokenf("%s job holds %d, its cost is %d", j.State, j.Reserved, j.Cost)
		}
		if j.Charged != 0 {
			return brokenf("%s job is already charged %d", j.State, j.Charged)
		}
	case StateSucceeded:
		if j.Reserved != 0 || j.Charged > j.Cost || !j.Metered && j.Charged != j.Cost {
			return brokenf("succeeded job holds %d and was charged %d of cost %d", j.Reserved, j.Charged, j.Cost)
		}
	case StateFailed, StateCancelled:
		if j.Reserved != 0 || j.Charged > j.Cost || !j.Metered && j.Charged != 0 {
			return brokenf("%s job holds %d and was charged %d", j.State, j.Reserved, j.Charged)
		}
	case StateRejected, StateHeld:
		if j.Reserved != 0 || j.Charged != 0 || j.Attempt != 0 {
			return brokenf("%s job holds %d, was charged %d and has attempt %d", j.State, j.Reserved, j.Charged, j.Attempt)
		}
	default:
		return brokenf("unknown state %q", j.State)
	}
	switch {
	case j.ID == "" || j.Account == "":
		return brokenf("job has no id or no account")
	case j.Cost < 0 || j.Cost > MaxCredits:
		return brokenf("cost %d is out of range", j.Cost)
	case j.State.OnHost() && (j.Host() == "" || j.Attempt < 1):
		return brokenf("%s job has host %q and attempt %d", j.State, j.Host(), j.Attempt)
	case j.State == StatePending && (j.Host() != "" || len(j.Devices()) > 0):
		return brokenf("pending job still names host %q and %d devices", j.Host(), len(j.Devices()))
	case j.State == StateRunning && len(j.Devices()) != j.GPUs:
		return brokenf("running job has %d devices for %d GPUs", len(j.Devices()), j.GPUs)
	case j.State == StateRejected && j.SubmitSeq != 0:
		return brokenf("rejected job has submit seq %d", j.SubmitSeq)
	case j.Failures < 0 || j.Failures > j.MaxAttempts || j.Failures > j.Attempt:
		return brokenf("%d failures with %d attempts of at most %d", j.Failures, j.Attempt, j.MaxAttempts)
	case j.BusyRefusals < 0 || j.BusyRefusals > MaxBusyRefusals || j.Failures+j.BusyRefusals > j.Attempt:
		return brokenf("%d busy refusals (at most %d) and %d failures with %d attempts", j.BusyRefusals, MaxBusyRefusals, j.Failures, j.Attempt)
	case len(j.Attempts()) > j.Failures+j.BusyRefusals+1:
		return brokenf("%d attempts recorded, more than %d failures, %d busy refusals and one more", len(j.Attempts()), j.Failures, j.BusyRefusals)
	case j.State.Active() && j.Failures >= j.MaxAttempts:
		return brokenf("%s job has spent %d of %d attempts", j.State, j.Failures, j.MaxAttempts)
	case j.CancelRequested && j.State == StatePending:
		return brokenf("pending job has a cancel requested")
	}
	return nil
}
