//go:build !unix

package blob

import "os"

// openFlags open a blob for reading (open_unix.go adds O_NONBLOCK where
// opening a FIFO would wait).
const openFlags = os.O_RDONLY
