package subjects

// The facts bucket: read-optimised facts the leading scheduler publishes for
// readers (wire.WaitFact, wire.PassFact, wire.SchedulerFact).

// FactsBucket is the KV bucket of the leader's facts: gpuq_facts.
func (n Names) FactsBucket() string { return n.prefix + "_facts" }

// FactConfigKey is the facts key of the leader's effective configuration.
const FactConfigKey = "config"

// FactPassKey is the facts key of the leader's latest pass whose facts are
// all written.
const FactPassKey = "pass"

// FactWaitPrefix begins the facts key of every waiting job's explanation.
const FactWaitPrefix = "wait."

// FactWaitKey is the facts key of why a waiting job waits:
// wait.<account>.<job>. Keyed by account so that a tenant may be allowed to
// read its own jobs' facts only.
func FactWaitKey(account, job string) string {
	mustToken("account", account)
	mustToken("job id", job)
	return FactWaitPrefix + account + "." + job
}
