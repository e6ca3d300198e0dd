package nvmlgpu

import "errors"

// ErrClosed reports a call on a [GPU] after [GPU.Close].
var ErrClosed = errors.New("nvmlgpu: closed")
