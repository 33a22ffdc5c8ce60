package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	easel "github.com/easelhq/easel/sdk/go"
)

// defaultURL is where `make run` serves the API.
const defaultURL = "http://127.0.0.1:8080"

// globals are the flags every command takes.
type globals struct {
	url    string
	apiKey string
	family string
	json   bool
}

// run runs the command line a.args.
func (a *app) run(ctx context.Context) error {
	g := &globals{}
	root := &cobra.Command{
		Use:   "easel",
		Short: "Generate images with Easel, look after its tasks, webhook endpoint and usage",
		Long: `easel is the command-line client of Easel, the image-generation task service.

The API's URL and key come from --url and --api-key, or from EASEL_URL and
EASEL_API_KEY (with ` + "`make run`" + `: ` + defaultURL + ` and the key it prints).`,
		Version:       easel.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(a.args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetContext(ctx)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see %s --help)", err, c.CommandPath())
	})
	f := root.PersistentFlags()
	f.StringVar(&g.url, "url", "", "the API's URL (default $EASEL_URL, else "+defaultURL+")")
	f.StringVar(&g.apiKey, "api-key", "", "the API key (default $EASEL_API_KEY)")
	f.StringVar(&g.family, "family", "", `the model family word that "standard" and "pro" are of (default $EASEL_MODEL_FAMILY, else lumen)`)
	f.BoolVar(&g.json, "json", false, "print JSON for scripts instead of text, and no progress bar")

	task := &cobra.Command{Use: "task", Short: "Look after tasks: get, list, cancel, wait"}
	task.AddCommand(a.getCmd(g), a.listCmd(g), a.cancelCmd(g), a.waitCmd(g))
	root.AddCommand(a.generateCmd(g), task, a.webhookCmd(g), a.usageCmd(g))
	return root.Execute()
}

// client makes the API client from the flags and the environment.
func (a *app) client(g *globals) (*easel.Client, error) {
	u := firstOf(g.url, a.env("EASEL_URL"), defaultURL)
	key := firstOf(g.apiKey, a.env("EASEL_API_KEY"))
	if key == "" {
		return nil, errors.New("no API key: pass --api-key or set EASEL_API_KEY (`make run` prints one)")
	}
	return easel.New(u, key, easel.WithUserAgent("easel-cli/"+easel.Version))
}

// model turns --model into a model id: "standard" and "pro" name the
// family's models; anything with a dash is taken as an id.
func (a *app) model(g *globals, m string) (string, error) {
	family := firstOf(g.family, a.env("EASEL_MODEL_FAMILY"), "lumen")
	switch strings.ToLower(m) {
	case "", "standard":
		return easel.StandardModel(family), nil
	case "pro":
		return easel.ProModel(family), nil
	}
	if strings.Contains(m, "-") {
		return m, nil
	}
	return "", fmt.Errorf("unknown model %q: use standard, pro or a model id such as %s", m, easel.ProModel(family))
}

// printJSON writes v as indented JSON on stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printTask writes a task record as text.
func (a *app) printTask(t *easel.Task) {
	w := a.stdout
	fmt.Fprintf(w, "%s  %s %d%%\n", t.ID, t.Status, t.Progress)
	fmt.Fprintf(w, "  model      %s\n", t.Model)
	if in := t.Input; in != nil {
		fmt.Fprintf(w, "  prompt     %s\n", in.Prompt)
		asked := fmt.Sprintf("%d %s", in.NumImages, in.OutputFormat)
		if in.OutputQuality != 0 {
			asked += fmt.Sprintf(" (quality %d)", in.OutputQuality)
		}
		fmt.Fprintf(w, "  images     %s\n", asked)
	}
	if t.Price != 0 {
		fmt.Fprintf(w, "  price      %d credits\n", t.Price)
	}
	fmt.Fprintf(w, "  created    %s\n", t.Created().Local().Format(time.DateTime))
	if !t.Started().IsZero() {
		fmt.Fprintf(w, "  started    %s (queued %s)\n", t.Started().Local().Format(time.DateTime), t.Started().Sub(t.Created()).Round(time.Millisecond))
	}
	if !t.Completed().IsZero() {
		fmt.Fprintf(w, "  ended      %s (%s)\n", t.Completed().Local().Format(time.DateTime), t.Completed().Sub(t.Created()).Round(time.Millisecond))
	}
	if t.QueuePosition != nil {
		fmt.Fprintf(w, "  queue      %s\n", queueText(t))
	}
	if t.Error != nil {
		fmt.Fprintf(w, "  error      %s: %s\n", t.Error.Code, t.Error.Message)
	}
	for _, r := range t.Results {
		fmt.Fprintf(w, "  result     %s\n", r)
	}
}

// queueText describes a pending task's place: "#3 in queue, about 12s",
// or "#1 in queue, starting" when a worker is about to pick it up.
func queueText(t *easel.Task) string {
	var s string
	if t.QueuePosition != nil {
		s = fmt.Sprintf("#%d in queue", *t.QueuePosition)
	}
	if eta, ok := t.ETA(); ok {
		if s != "" {
			s += ", "
		}
		if eta < time.Second {
			s += "starting"
		} else {
			s += "about " + eta.Round(time.Second).String()
		}
	}
	return s
}

// endError is the error of a task that ended without images.
func endError(t *easel.Task) error {
	switch t.Status {
	case easel.StatusFailed:
		if t.Error != nil {
			return fmt.Errorf("task %s failed: %s: %s", t.ID, t.Error.Code, t.Error.Message)
		}
		return fmt.Errorf("task %s failed", t.ID)
	case easel.StatusCanceled:
		return fmt.Errorf("task %s was canceled", t.ID)
	}
	return nil
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
