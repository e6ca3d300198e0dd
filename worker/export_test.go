package worker

// CgroupTestBase is a cgroup v2 directory this test process may give
// workers cgroup directories below, or "" (see cgroupTestBase).
var CgroupTestBase = cgroupTestBase
