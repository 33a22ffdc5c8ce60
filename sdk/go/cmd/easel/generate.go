package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	easel "github.com/easelhq/easel/sdk/go"
)

func (a *app) generateCmd(g *globals) *cobra.Command {
	var (
		model, size, ratio, output string
		format                     string
		quality, count             int
		images                     []string
		timeout, waitOnCreate      time.Duration
		noWait                     bool
	)
	cmd := &cobra.Command{
		Use:   "generate PROMPT",
		Short: "Generate an image: create a task, follow its progress, download the result",
		Long: `generate creates a task, shows its progress (a spinner with the queue position
while it waits for a worker, then a bar), downloads the image and prints where
it wrote it. The bar is drawn only when stdout is a terminal.

--image makes the task an edit of images (repeat it for up to 10): an http(s)
URL, or a local file, which is uploaded first (POST /v1/uploads: a PNG, JPEG,
WebP or GIF of at most 20 MB; its URL is valid 24 hours).
-n makes several images (up to 4, each priced): they are written as FILE-1,
FILE-2... --format picks png (default), jpeg or webp (--quality 1-100,
default 90; webp at 100 is lossless).`,
		Example: `  easel generate "a lighthouse at dusk" --model pro --size 2K --ratio 16:9 -o lighthouse.png
  easel generate "make it winter" --image https://example.com/photo.jpg -o winter.png
  easel generate "make it winter" --image ./photo.jpg -o winter.png
  easel generate "a cat" -n 4 --format jpeg --quality 80 -o cat.jpg
  easel generate "a cat" --json
  easel generate "a cat" --wait-on-create 60s -o cat.png
  ID=$(easel generate "a cat" --no-wait) && easel task wait "$ID" -o cat.png`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := a.model(g, model)
			if err != nil {
				return err
			}
			if err := checkImages(images); err != nil {
				return err
			}
			c, err := a.client(g)
			if err != nil {
				return err
			}
			urls, err := uploadImages(cmd.Context(), c, images)
			if err != nil {
				return err
			}
			req := easel.CreateRequest{
				Model:       id,
				Prompt:      args[0],
				AspectRatio: ratio,
				ImageSize:   strings.ToUpper(size),
				ImageURLs:   urls,
				// Zero values are left out: the server's defaults.
				OutputFormat:  strings.ToLower(format),
				OutputQuality: quality,
				NumImages:     count,
			}
			var taskID string
			if waitOnCreate > 0 && !noWait {
				// The server holds the create until the image is made (up
				// to the wait): the follow below then finds it final.
				t, err := c.CreateAndWait(cmd.Context(), req, waitOnCreate)
				if err != nil {
					return err
				}
				taskID = t.ID
			} else if taskID, err = c.Create(cmd.Context(), req); err != nil {
				return err
			}
			if noWait {
				if g.json {
					return a.printJSON(map[string]string{"task_id": taskID})
				}
				_, err := fmt.Fprintln(a.stdout, taskID)
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return a.follow(ctx, g, c, taskID, output, true)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&model, "model", "m", "standard", "standard, pro, or a model id")
	f.StringVar(&size, "size", "", "1K, 2K or 4K (pro only; default 1K)")
	f.StringVar(&ratio, "ratio", "", "aspect ratio: 1:1 2:3 3:2 3:4 4:3 4:5 5:4 9:16 16:9 21:9 (default 1:1, or the source image's)")
	f.StringArrayVar(&images, "image", nil, "a source image to edit: an http(s) URL, or a local file to upload (repeatable)")
	f.StringVar(&format, "format", "", "the images' format: png, jpeg or webp (default png)")
	f.IntVar(&quality, "quality", 0, "jpeg or webp quality, 1 to 100 (default 90; webp at 100: lossless)")
	f.IntVarP(&count, "num-images", "n", 0, "how many images to make, 1 to 4 (default 1; each is priced)")
	f.StringVarP(&output, "output", "o", "", "the file (or directory) to write the image to (default <task id>.png here)")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "give up waiting after this long (the task goes on)")
	f.DurationVar(&waitOnCreate, "wait-on-create", 0, "have the server hold the create until the image is made, up to this long (at most 60s; Prefer: wait), before following the task")
	f.BoolVar(&noWait, "no-wait", false, "print the new task's id and return (follow it with easel task wait)")
	return cmd
}

// checkImages refuses --image values that are neither http(s) URLs nor
// regular files, before anything is sent.
func checkImages(images []string) error {
	for _, s := range images {
		if isURL(s) {
			continue
		}
		st, err := os.Stat(s)
		switch {
		case err == nil && st.Mode().IsRegular():
			if st.Size() > easel.MaxUploadBytes {
				return fmt.Errorf("--image %s is %d bytes: the largest upload is %d MB", s, st.Size(), easel.MaxUploadBytes>>20)
			}
			continue
		case err == nil:
			return fmt.Errorf("--image %s is not a regular file", s)
		}
		return fmt.Errorf("--image %q is not an http(s) URL or a file", s)
	}
	return nil
}

func isURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// uploadImages returns the URLs of the --image values: a URL as it is, a
// local file uploaded (POST /v1/uploads) and its upload's URL.
func uploadImages(ctx context.Context, c *easel.Client, images []string) ([]string, error) {
	var out []string
	for _, s := range images {
		if isURL(s) {
			out = append(out, s)
			continue
		}
		data, err := os.ReadFile(s)
		if err != nil {
			return nil, fmt.Errorf("--image %s: %w", s, err)
		}
		up, err := c.Upload(ctx, s, data)
		if err != nil {
			return nil, fmt.Errorf("--image %s: upload: %w", s, err)
		}
		out = append(out, up.URL)
	}
	return out, nil
}

// follow waits for a task with a progress display, downloads its images
// to output (when download is set, or output is given) and prints the
// outcome.
func (a *app) follow(ctx context.Context, g *globals, c *easel.Client, taskID, output string, download bool) error {
	var view *progressView
	if !g.json && a.interactive() {
		view = newProgressView(a.stdout)
	}
	t, err := c.Wait(ctx, taskID, easel.OnUpdate(func(t *easel.Task) {
		if view != nil {
			view.update(t)
		}
	}))
	if view != nil {
		view.close(t)
	}
	if err != nil {
		if ctx.Err() != nil {
			why := "interrupted"
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				why = "gave up waiting (--timeout)"
			}
			return fmt.Errorf("%s: task %s goes on; `easel task wait %s -o FILE` picks it up, `easel task cancel %s` cancels it", why, taskID, taskID, taskID)
		}
		return err
	}
	var files []string
	if t.Status == easel.StatusCompleted && (download || output != "") {
		files, err = a.download(ctx, c, t, output)
		if err != nil {
			return err
		}
	}
	if g.json {
		if err := a.printJSON(struct {
			Task  *easel.Task `json:"task"`
			Files []string    `json:"files,omitempty"`
		}{t, files}); err != nil {
			return err
		}
	} else if len(files) == 0 {
		a.printTask(t)
	}
	for _, f := range files {
		if !g.json {
			fmt.Fprintf(a.stdout, "wrote %s\n", f)
		}
	}
	return endError(t)
}

// download writes a completed task's images and returns their paths.
func (a *app) download(ctx context.Context, c *easel.Client, t *easel.Task, output string) ([]string, error) {
	var files []string
	for i, r := range t.Results {
		name := outputPath(output, t.ID, r, i, len(t.Results))
		if err := writeFile(ctx, c, r, name); err != nil {
			return files, fmt.Errorf("downloading the image of task %s: %w", t.ID, err)
		}
		files = append(files, name)
	}
	return files, nil
}

// outputPath names image i of n: output itself for a single image, with
// -1, -2... before the extension for several; in a directory, or without
// an output, the task id with the result's extension.
func outputPath(output, taskID, resultURL string, i, n int) string {
	ext := ".png"
	if u, err := url.Parse(resultURL); err == nil && path.Ext(u.Path) != "" {
		ext = path.Ext(u.Path)
	}
	name := output
	if st, err := os.Stat(output); output == "" || err == nil && st.IsDir() {
		name = filepath.Join(output, taskID+ext)
	}
	if n > 1 {
		e := filepath.Ext(name)
		name = fmt.Sprintf("%s-%d%s", strings.TrimSuffix(name, e), i+1, e)
	}
	return name
}

// writeFile downloads a result to name, through a temporary file beside it
// so that a cut download leaves no partial image.
func writeFile(ctx context.Context, c *easel.Client, resultURL, name string) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*.part")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := c.Download(ctx, resultURL, tmp); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
