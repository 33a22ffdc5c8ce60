module github.com/easelhq/easel/sdk/go

go 1.25.0
