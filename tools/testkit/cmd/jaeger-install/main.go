// Command jaeger-install builds the Jaeger the tracing tests run
// (jaegerproc.JaegerVersion) into the cache, if it is not there yet, and
// prints its path: `make test` runs it first, so no test waits minutes for
// the build.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/easelhq/easel/tools/testkit/jaegerproc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bin, err := jaegerproc.Binary(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jaeger-install:", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
