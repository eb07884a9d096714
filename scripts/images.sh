#!/usr/bin/env bash
# Build Flow's container images from static binaries built on this machine, with nothing pulled
# from a registry (the images are FROM scratch):
#
#   bin/linux/flowd, bin/linux/flow   CGO_ENABLED=0 builds of ./cmd/flowd and ./cmd/flow
#   bin/linux/nats-server             the nats-server module at the version go.mod requires
#   flowrun/flow:$IMAGE_TAG           deploy/docker/flow.Dockerfile (entrypoint /flowd)
#   flowrun/nats:$IMAGE_TAG           deploy/docker/nats.Dockerfile (entrypoint /nats-server)
#
# Variables: IMAGE_TAG (default dev), OUT (the binaries and build
# context, default bin/linux), GO (default go), GOARCH (default the host's: the images are for
# the host's architecture), DOCKER (default docker), CA_BUNDLE (the certificate authorities the
# flow image trusts, default /etc/ssl/certs/ca-certificates.crt).
# The images carry the OCI labels version (git describe) and revision (the commit).
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
DOCKER=${DOCKER:-docker}
IMAGE_TAG=${IMAGE_TAG:-dev}
GOARCH=${GOARCH:-$($GO env GOARCH)}
out=${OUT:-bin/linux}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

version=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source_url=https://github.com/flowrun/flow

if ! [ -r "$CA_BUNDLE" ]; then
	echo "images: no CA bundle at $CA_BUNDLE: install ca-certificates (Debian: apt-get install ca-certificates)," >&2
	echo "or set CA_BUNDLE to a PEM file of the certificate authorities the images should trust" >&2
	exit 1
fi

mkdir -p "$out"
# The build context: the binaries, the CA bundle, and two empty directories that become /data
# and /tmp, owned by the images' user.
rm -rf "$out/empty" "$out/tmp"
mkdir -p "$out/empty" "$out/tmp"
cp "$CA_BUNDLE" "$out/ca-certificates.crt"

export CGO_ENABLED=0 GOOS=linux GOARCH
# flow version and flowd's telemetry report the version (an -X of a variable a binary lacks is
# ignored).
ldflags="-s -w -X github.com/flowrun/flow/internal/cli.version=$version -X main.version=$version"
echo "images: building $out/flowd, $out/flow ($version, linux/$GOARCH)"
$GO build -trimpath -ldflags "$ldflags" -o "$out/flowd" ./cmd/flowd
$GO build -trimpath -ldflags "$ldflags" -o "$out/flow" ./cmd/flow
nats_version=$($GO list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
echo "images: building $out/nats-server $nats_version (the version go.mod requires)"
$GO build -trimpath -ldflags "-s -w" -o "$out/nats-server" github.com/nats-io/nats-server/v2

build() { # build NAME DOCKERFILE TITLE VERSION
	echo "images: building flowrun/$1:$IMAGE_TAG"
	$DOCKER build --quiet -f "$2" -t "flowrun/$1:$IMAGE_TAG" \
		--build-arg "VERSION=$4" --build-arg "REVISION=$revision" \
		--build-arg "TITLE=$3" --build-arg "SOURCE=$source_url" "$out" >/dev/null
}
build flow deploy/docker/flow.Dockerfile "Flow (flowd services and the flow CLI)" "$version"
build nats deploy/docker/nats.Dockerfile "NATS server $nats_version for Flow" "$version"
echo "images: done: flowrun/flow:$IMAGE_TAG flowrun/nats:$IMAGE_TAG"
