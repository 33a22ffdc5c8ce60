package easel_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	_ "image/png" // result images are PNG
	"log"
	"os"
	"time"

	easel "github.com/easelhq/easel/sdk/go"
)

// Generate an image and download it. With `make run` going in another
// terminal:
//
//	EASEL_URL=http://127.0.0.1:8080 EASEL_API_KEY=esk_local_development_key_do_not_deploy_01 \
//	  go test -run Example .
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := easel.New(os.Getenv("EASEL_URL"), os.Getenv("EASEL_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	task, err := c.Generate(ctx, easel.CreateRequest{
		Model:       easel.ModelStandard,
		Prompt:      "a lighthouse on a cliff at dusk",
		AspectRatio: "16:9",
	}, easel.OnUpdate(func(t *easel.Task) {
		log.Printf("%s %s %d%%", t.ID, t.Status, t.Progress) // to stderr
	}))
	if err != nil {
		log.Fatal(err)
	}
	if task.Status != easel.StatusCompleted {
		log.Fatalf("task %s: %s %v", task.ID, task.Status, task.Error)
	}

	var img bytes.Buffer
	if _, err := c.Download(ctx, task.Results[0], &img); err != nil {
		log.Fatal(err)
	}
	cfg, format, err := image.DecodeConfig(&img)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, task.Progress, format, cfg.Width, "x", cfg.Height)
	// Output: completed 100 png 1344 x 768
}
