// Command easel is the command-line client of Easel: generate an image
// with a live progress bar and download it, or look after tasks (get, list,
// cancel, wait). It talks to the API at --url (EASEL_URL) with the key
// --api-key (EASEL_API_KEY).
//
//	easel generate "a lighthouse at dusk" --model pro --size 2K --ratio 16:9 -o lighthouse.png
//	easel task list --status processing
//	easel task wait task_lumen_... -o out.png
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{args: os.Args[1:], env: os.Getenv, stdout: os.Stdout, stderr: os.Stderr}
	err := a.run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "easel: %v\n", err)
		os.Exit(1)
	}
}

// app is one run of the command: its arguments, environment and output.
type app struct {
	args   []string
	env    func(string) string
	stdout io.Writer
	stderr io.Writer
	// tty forces the progress display on or off; nil: on when stdout is
	// a terminal.
	tty *bool
}

// interactive reports whether stdout is a terminal, where the progress
// bar is drawn.
func (a *app) interactive() bool {
	if a.tty != nil {
		return *a.tty
	}
	f, ok := a.stdout.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
