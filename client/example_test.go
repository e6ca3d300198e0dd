package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
)

// A pipeline's life on an installation (here an embedded one, with a
// scheduler and a worker on simulated GPUs): create an account, submit a
// job, wait for it, list the account's jobs, and branch on a rejection's
// reason.
func Example() {
	in, err := startGpuq()
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := in.stop(); err != nil {
			log.Fatal(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := client.New(in.nc) // in.nc: a *nats.Conn to the installation
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Admin(ctx, ledger.Admin{Account: "vision", ID: "op-1", Op: ledger.OpCreate, Balance: 1000}); err != nil {
		log.Fatal(err)
	}
	ev, err := c.Submit(ctx, ledger.Submit{Account: "vision", ID: "train-42", GPUs: 2, Cost: 120,
		Walltime: time.Minute, Command: []string{"true"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.Type, ev.Job)

	final, err := c.Wait(ctx, "vision", "train-42", ev.Seq)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: charged %d, balance %d\n", final.Type, final.Charged, final.Balance)

	page, err := c.Jobs(ctx, client.JobFilter{Account: "vision", Limit: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range page.Jobs {
		fmt.Println(j.ID, j.State, j.Charged)
	}

	_, err = c.Submit(ctx, ledger.Submit{Account: "vision", ID: "train-43", GPUs: 8, Cost: 5000,
		Walltime: time.Minute, Command: []string{"true"}})
	fmt.Println("insufficient credits:", errors.Is(err, client.ErrInsufficientCredits))
	// Output:
	// accepted train-42
	// succeeded: charged 120, balance 880
	// train-42 succeeded 120
	// insufficient credits: true
}
