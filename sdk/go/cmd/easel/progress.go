package main

import (
	"fmt"
	"io"
	"sync"

	"github.com/schollz/progressbar/v3"

	easel "github.com/easelhq/easel/sdk/go"
)

// progressView draws a task's progress on a terminal: a spinner with the
// queue position while it is pending, then a bar of its progress.
type progressView struct {
	w       io.Writer
	mu      sync.Mutex
	spinner *progressbar.ProgressBar
	bar     *progressbar.ProgressBar
	status  easel.Status // the bar's
}

func newProgressView(w io.Writer) *progressView { return &progressView{w: w} }

// update shows a task record.
func (v *progressView) update(t *easel.Task) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if t.Status == easel.StatusPending {
		desc := "pending"
		if q := queueText(t); q != "" {
			desc += ": " + q
		}
		if v.spinner == nil && v.bar == nil {
			v.spinner = progressbar.NewOptions(-1,
				progressbar.OptionSetWriter(v.w),
				progressbar.OptionSpinnerType(14),
				progressbar.OptionSetElapsedTime(true),
				progressbar.OptionClearOnFinish(),
				progressbar.OptionSetDescription(desc),
			)
			_ = v.spinner.RenderBlank() // starts the spinner's clock
			return
		}
		if v.spinner != nil {
			v.spinner.Describe(desc)
		}
		return
	}
	v.stopSpinner()
	if v.bar == nil {
		v.bar = progressbar.NewOptions(100,
			progressbar.OptionSetWriter(v.w),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetDescription(fmt.Sprintf("%-10s", t.Status)),
			progressbar.OptionSetTheme(progressbar.Theme{Saucer: "█", SaucerPadding: "░", BarStart: " ", BarEnd: " "}),
		)
		_ = v.bar.RenderBlank()
		v.status = t.Status
	}
	if t.Status != v.status {
		v.bar.Describe(fmt.Sprintf("%-10s", t.Status))
		v.status = t.Status
	}
	if t.Status != easel.StatusFailed && t.Status != easel.StatusCanceled {
		_ = v.bar.Set(t.Progress)
	}
}

// close ends the display, leaving the bar's last line, after the final
// record t (nil when waiting stopped first).
func (v *progressView) close(t *easel.Task) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stopSpinner()
	if v.bar != nil {
		if t != nil && t.Status == easel.StatusCompleted {
			_ = v.bar.Finish()
		} else {
			_ = v.bar.Exit()
		}
		fmt.Fprintln(v.w)
	}
}

func (v *progressView) stopSpinner() {
	if v.spinner != nil {
		_ = v.spinner.Finish() // clears its line and stops its ticker
		v.spinner = nil
	}
}
