// Command easel is the command-line client of Easel: generate an image
// with a live progress bar and download it, look after tasks (get, list,
// cancel, wait), set and test the account's default webhook endpoint, or
// read the account's usage. It talks to the API at --url (EASEL_URL) with
// the key --api-key (EASEL_API_KEY).
//
//	easel generate "a lighthouse at dusk" --model pro --size 2K --ratio 16:9 -o lighthouse.png
//	easel task list --status processing
//	easel task wait task_lumen_... -o out.png
//	easel webhook set https://hooks.example.com/easel && easel webhook test
//	easel usage --days 7 --csv > usage.csv
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/term"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{args: os.Args[1:], env: os.Getenv, stdout: os.Stdout, stderr: os.Stderr}
	err := a.run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(1)
	}
}

// errorLine is the one line main prints for err: "easel: " once, then the
// error. The SDK's errors start with "easel: " themselves, so that prefix is
// dropped from the front of err and from wherever the command wrapped one
// ("downloading ...: easel: 410 Gone: ..."); line breaks (in a proxy's
// page quoted by an APIError) become spaces.
func errorLine(err error) string {
	msg := strings.TrimPrefix(err.Error(), sdkPrefix)
	msg = strings.ReplaceAll(msg, ": "+sdkPrefix, ": ")
	lines := strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' })
	kept := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			kept = append(kept, l)
		}
	}
	return sdkPrefix + strings.Join(kept, " ")
}

// sdkPrefix starts the SDK's error messages, and the command's lines.
const sdkPrefix = "easel: "

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
