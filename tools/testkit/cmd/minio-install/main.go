// Command minio-install builds the MinIO the tests run (s3proc.MinIOVersion)
// into the cache, if it is not there yet, and prints its path: `make test`
// runs it first, so no test waits minutes for the build.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/easelhq/easel/tools/testkit/s3proc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bin, err := s3proc.Binary(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "minio-install:", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
