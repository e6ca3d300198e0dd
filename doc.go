// Package gpuq is a GPU credit scheduler on NATS JetStream.
//
// Teams own accounts with credit balances; pipelines submit GPU jobs to a
// JetStream command log; one active scheduler folds that log into a credit
// ledger kept in a JetStream KV bucket and dispatches jobs to workers on GPU
// hosts. See README.md for the flow, the invariants and how to run it.
//
// The root package holds no code; it carries the end-to-end tests that run
// the real parts together. The parts are:
//
//   - [github.com/gpuq/gpuq/ledger]: the credit state machine, a pure fold;
//   - [github.com/gpuq/gpuq/subjects]: every name on the wire;
//   - [github.com/gpuq/gpuq/wire]: the JSON v1 codec.
package gpuq
