# syntax=docker/dockerfile:1
# The Easel API gateway. Build from the repository root:
#   docker build -f deploy/gateway.Dockerfile -t easel-gateway .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY . .
# The shared result directory, owned by the runtime user so a fresh named
# volume mounted there is writable.
RUN mkdir -p /out/data/blobs
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gateway ./api-gateway/cmd/gateway && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/easelctl ./tools/cmd/easelctl

# Static binary on a distroless base: no shell, CA certificates, runs as the
# unprivileged user 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /usr/local/bin/gateway
# The operator CLI, for `docker compose exec gateway easelctl ...`.
COPY --from=build /out/easelctl /usr/local/bin/easelctl
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
EXPOSE 8080
ENV EASEL_HTTP_ADDR=:8080
ENTRYPOINT ["/usr/local/bin/gateway"]
