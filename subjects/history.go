package subjects

import (
	"fmt"
	"strings"
)

// History subjects (stream GPUQ_HISTORY): the final record of every job the
// scheduler archived, one subject per job under its account, so an admin
// reads all of them and a tenant's permissions can name its own account's.

// HistoryStream holds the final records of archived jobs: GPUQ_HISTORY.
func (n Names) HistoryStream() string { return n.upper + "_HISTORY" }

// HistoryFilter is the subject filter of the history stream: gpuq.history.*.*.
func (n Names) HistoryFilter() string { return n.prefix + ".history.*.*" }

// History is where the final record of job of account is kept once it is
// archived: gpuq.history.<account>.<job>.
func (n Names) History(account, job string) string {
	mustToken("account", account)
	mustToken("job id", job)
	return n.prefix + ".history." + account + "." + job
}

// JobHistory is the filter for the records of job under any account:
// gpuq.history.*.<job>. A reader that may read every account's history
// (an admin) looks a job up by id alone through it.
func (n Names) JobHistory(job string) string {
	mustToken("job id", job)
	return n.prefix + ".history.*." + job
}

// AccountHistory is the filter for the history of every job of account:
// gpuq.history.<account>.*. A tenant's permission to read its history is a
// permission on this filter.
func (n Names) AccountHistory(account string) string {
	mustToken("account", account)
	return n.prefix + ".history." + account + ".*"
}

// AllHistory is the filter for every archived job: gpuq.history.>.
func (n Names) AllHistory() string { return n.prefix + ".history.>" }

// ParseHistory parses a subject of the history stream into its account and
// job.
func (n Names) ParseHistory(subject string) (account, job string, err error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".history.")
	account, job, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(job, ".") {
		return "", "", fmt.Errorf("%q: want %s.history.<account>.<job>: %w", subject, n.prefix, ErrBadSubject)
	}
	if err := CheckToken("account", account); err != nil {
		return "", "", err
	}
	if err := CheckToken("job id", job); err != nil {
		return "", "", err
	}
	return account, job, nil
}
