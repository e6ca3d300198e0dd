//go:build unix && !linux

package worker

import "errors"

// Cgroups are Linux's: Config.Cgroup is refused elsewhere, so no jail
// ever has one.

type cgroupTree struct{ root string }

type cgroup struct{}

func openCgroups(string) (*cgroupTree, error) {
	return nil, errors.New("cgroups are supported on Linux only")
}

func (*cgroupTree) take() (*cgroup, error) { return nil, errors.ErrUnsupported }
func (*cgroupTree) give(*cgroup) error     { return nil }
func (*cgroupTree) close() error           { return nil }

// OwnCgroup fails outside Linux.
func OwnCgroup() (string, error) {
	return "", errors.New("worker: cgroups are supported on Linux only")
}

// CheckCgroup fails outside Linux.
func CheckCgroup(dir string) error {
	_, err := openCgroups(dir)
	return err
}
