//go:build !linux

package worker

// cgroupTestBase is "" outside Linux: there are no cgroup modes.
func cgroupTestBase() string { return "" }
