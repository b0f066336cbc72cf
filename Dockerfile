# Images of both controllers (and the kubectl plugin binary), static and
# distroless:
#   docker build --target nodeset-controller -t nodeset-controller .
#   docker build --target node-controller -t node-controller .
# For docker-machine, build FROM the node-controller stage and COPY your
# docker-machine-driver-<name> binaries into /usr/local/bin.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -tags grpcnotrace -trimpath -ldflags="-s -w" -o /out/ ./cmd/nodeset-controller ./cmd/nodeset-certs ./cmd/node-controller ./cmd/kubectl-nodeset

FROM gcr.io/distroless/static-debian12:nonroot AS nodeset-controller
COPY --from=build /out/nodeset-controller /usr/local/bin/nodeset-controller
# deploy/certs runs it as a Job: the certificates of the webhook and the autoscaler API.
COPY --from=build /out/nodeset-certs /usr/local/bin/nodeset-certs
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/nodeset-controller"]

FROM gcr.io/distroless/static-debian12:nonroot AS node-controller
COPY --from=build /out/node-controller /usr/local/bin/node-controller
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/node-controller"]
