//go:build unix

package blob

import (
	"os"
	"syscall"
)

// openFlags open a blob for reading without waiting: a FIFO opened
// without O_NONBLOCK waits for a writer, forever if none comes. Reads of a
// regular file never wait, O_NONBLOCK or not.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK
