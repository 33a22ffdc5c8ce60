module github.com/easelhq/easel/e2e

go 1.26.0

require (
	github.com/easelhq/easel/api-gateway v0.0.0-00010101000000-000000000000
	github.com/easelhq/easel/pkg v0.0.0-00010101000000-000000000000
	github.com/easelhq/easel/proto v0.0.0-00010101000000-000000000000
	github.com/easelhq/easel/worker v0.0.0-00010101000000-000000000000
)

replace github.com/easelhq/easel/proto => ../proto

replace github.com/easelhq/easel/pkg => ../pkg

replace github.com/easelhq/easel/api-gateway => ../api-gateway

replace github.com/easelhq/easel/worker => ../worker
