//go:build cgo

package nvmlgpu_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gpuq/gpuq/internal/nvmlgpu"
)

// A simulated worker host: two H100s whose UUIDs derive from the host
// name, one of them busy and then hit by an Xid.
func Example() {
	g, err := nvmlgpu.Simulate("node-a", "dgxh100", 2)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	g.Sim().SetProcesses(1, 1)
	g.Sim().SetUsedMiB(1, 4096)

	devices, err := g.Devices()
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range devices {
		fmt.Printf("%d %s %s %d/%d MiB, %d processes\n", d.Index, d.UUID, d.Model, d.UsedMiB, d.MemoryMiB, d.Processes)
	}

	ctx, cancel := context.WithCancel(context.Background())
	g.Sim().InjectXid(1, 79)
	err = g.WatchHealth(ctx, func(uuid, reason string) {
		fmt.Println("unhealthy:", uuid, reason)
		cancel()
	})
	fmt.Println("WatchHealth:", err)
	// Output:
	// 0 GPU-4f021113-d9d9-8e5c-bcb4-6d2f9864ef5b NVIDIA H100 80GB HBM3 0/81920 MiB, 0 processes
	// 1 GPU-50ed121e-a7c0-8f55-9476-a162db172bbe NVIDIA H100 80GB HBM3 4096/81920 MiB, 1 processes
	// unhealthy: GPU-50ed121e-a7c0-8f55-9476-a162db172bbe Xid 79
	// WatchHealth: <nil>
}
