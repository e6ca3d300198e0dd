package wire

import (
	"errors"
	"strconv"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// DecodeSeal decodes the body of gpuq.cmd.sched.seal:
// {"v":1,"account":"vision","after":17}.
func DecodeSeal(data []byte) (ledger.Seal, error) {
	f, err := object(data)
	if err != nil {
		return ledger.Seal{}, decodeError("", "", "seal decision", err)
	}
	s := ledger.Seal{Account: f.token("account", "account", true)}
	if after := f.int64("after", false); after >= 0 {
		s.After = uint64(after)
	} else if len(f.errs) == 0 {
		f.bad("after %d is negative", after)
	}
	if err := f.done(s.Account, "", "seal decision", s); err != nil {
		return ledger.Seal{}, err
	}
	return s, nil
}

// EncodeSeal returns the message logging seal decision s.
func EncodeSeal(n subjects.Names, s ledger.Seal) (Message, error) {
	if err := errors.Join(subjects.CheckToken("account", s.Account), s.Validate()); err != nil {
		return Message{}, err
	}
	return encode(n.Sched(subjects.SchedSeal), SealMsgID(s.Account, s.After), struct {
		V       int    `json:"v"`
		Account string `json:"account"`
		After   uint64 `json:"after"`
	}{Version, s.Account, s.After})
}

// SealMsgID is the id of the scheduler's decision to seal account's
// journal after its seal at position after: two decisions about the same
// newest seal are one.
func SealMsgID(account string, after uint64) string {
	return "seal." + account + "." + strconv.FormatUint(after, 10)
}
