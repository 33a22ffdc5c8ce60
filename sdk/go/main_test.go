package easel_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain skips the package example unless EASEL_URL and EASEL_API_KEY
// name a running Easel (`make run`): it talks to the real API.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("EASEL_URL") == "" || os.Getenv("EASEL_API_KEY") == "" {
		skip := "^Example$"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if testing.Verbose() {
			fmt.Println("Example skipped: set EASEL_URL and EASEL_API_KEY to run it against a running Easel")
		}
	}
	os.Exit(m.Run())
}
