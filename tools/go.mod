module github.com/easelhq/easel/tools

go 1.26.0

replace (
	github.com/easelhq/easel/pkg => ../pkg
	github.com/easelhq/easel/proto => ../proto
)

replace github.com/easelhq/easel/tools/testkit => ./testkit

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/easelhq/easel/pkg v0.0.0-00010101000000-000000000000
	github.com/easelhq/easel/tools/testkit v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/spf13/cobra v1.10.2
	go.uber.org/zap v1.28.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
