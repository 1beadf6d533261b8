# Payment gateway image.
#
#   docker build -t gateway .
#   docker run --rm -p 127.0.0.1:8080:8080 \
#     -e GATEWAY_DATABASE_DSN='gateway:gateway@tcp(db:3306)/gateway' gateway
#
# The runtime image is a slim Debian with only the binary and CA certificates
# (for the PSPs' HTTPS APIs), and no curl: its HEALTHCHECK is
# `gateway healthcheck`, which asks the gateway's own GET /readyz. Kubernetes or
# a load balancer can probe GET /healthz and GET /readyz directly. Apply the
# schema first (`gateway migrate up`): serve refuses a schema behind its
# release. `gateway dev` does not work in this image: it needs a local MariaDB
# server binary; use docker-compose.yml instead.

# ---- build ------------------------------------------------------------------
FROM golang:1.26-bookworm AS build

WORKDIR /src

# CGO off: a pure-Go static binary.
# The golang image sets GOTOOLCHAIN=local; auto lets a stale cached 1.26.x
# image fetch the toolchain go.mod asks for (go 1.26.8) instead of failing,
# and does nothing when the image is new enough.
ENV CGO_ENABLED=0 \
    GOTOOLCHAIN=auto

# Dependencies first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/gateway ./cmd/gateway

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 65532 --user-group --no-create-home gateway

COPY --from=build /out/gateway /gateway

# The default 127.0.0.1:8080 would be unreachable from outside the container.
ENV GATEWAY_ADDR=0.0.0.0:8080 \
    GATEWAY_LOG_FORMAT=json

EXPOSE 8080

USER 65532:65532

HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["/gateway", "healthcheck"]

ENTRYPOINT ["/gateway"]
CMD ["serve"]
