# syntax=docker/dockerfile:1
# An Easel worker. Build from the repository root:
#   docker build -f deploy/worker.Dockerfile -t easel-worker .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY . .
# The shared result directory, owned by the runtime user so a fresh named
# volume mounted there is writable.
RUN mkdir -p /out/data/blobs
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -tags nodynamic -trimpath -ldflags="-s -w" -o /out/worker ./worker/cmd/worker && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/easelctl ./tools/cmd/easelctl

# Static binary (nodynamic: the lossy WebP encoder's optional use of a
# system libwebp.so would link it dynamically) on a distroless base: no shell, CA certificates (for fetching
# source images over https), runs as the unprivileged user 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /usr/local/bin/worker
# For the health check (easelctl probe): the image has no shell or curl.
COPY --from=build /out/easelctl /usr/local/bin/easelctl
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
EXPOSE 8081
ENV EASEL_WORKER_HTTP_ADDR=:8081
ENTRYPOINT ["/usr/local/bin/worker"]
