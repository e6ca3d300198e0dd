// Package wire is the JSON codec of gpuq's v1 contract: the commands that
// pipelines, admins, workers and the scheduler publish to the command
// stream, and the events, journal entries and orders the scheduler publishes
// in return.
//
// Decoding is strict about what it needs and lenient about what it does not:
// a message must be a JSON object with "v": 1 and every required field in
// range, or the decoder says everything that is wrong with it in one error;
// unknown fields are ignored so later versions can add them. Decoded
// commands have passed their ledger Validate method, so the fold sees only
// commands it can judge on their merits.
//
// Every message has a de-duplication id (the Nats-Msg-Id header), derived
// from what the message is about, so that a retried publish inside the
// stream's duplicate window is stored once.
//
// The package performs no I/O; it imports the ledger and subjects packages
// and the standard library.
package wire
