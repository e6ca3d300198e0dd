package wire_test

import (
	"fmt"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// A pipeline encodes a submission; the scheduler decodes what arrives on the
// command stream, and a malformed body becomes a rejection with a reason.
func Example() {
	n := subjects.Default
	msg, err := wire.EncodeSubmit(n, ledger.Submit{Account: "vision", ID: "train-42", GPUs: 2, Cost: 120,
		Command: []string{"python", "train.py"}, Walltime: 2 * time.Hour})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.Subject, msg.MsgID)
	fmt.Println(string(msg.Data))

	cmd, err := wire.DecodeCommand(n, msg.Subject, msg.Data)
	fmt.Printf("%s %v\n", cmd.Kind(), err)

	_, err = wire.DecodeCommand(n, n.Submit("vision"), []byte(`{"v":1,"id":"train-43","gpus":2,"cost":-5,"command":[]}`))
	if de, ok := err.(*wire.DecodeError); ok {
		fmt.Println(de.Reason, "-", de)
	}
	// Output:
	// gpuq.cmd.submit.vision submit.vision.train-42.566ec6a12d37a865
	// {"v":1,"id":"train-42","priority":0,"gpus":2,"cost":120,"command":["python","train.py"],"walltime":"2h0m0s"}
	// submit <nil>
	// invalid - submission of train-43 rejected: cost -5 is negative; command is empty; give the program and its arguments
}
