#!/usr/bin/env bash
# Makes the images the container tests run, each only when its tag is
# missing (podman's local storage; no registry is used):
#   - debian:bookworm-slim, the Dockerfile's base: a Debian bookworm minbase
#     made by mmdebstrap from Debian's archive;
#   - mcp-test-services: the same base with Debian's redis-server, nginx,
#     prometheus, python3, wget and ca-certificates, from which the services
#     docker-compose.yml names are tagged with the names it gives them
#     (redis:7-alpine, nginx:1.27-alpine, prom/prometheus:v3.5.0) and the
#     entrypoints and paths of those images, see services.Containerfile;
#   - mcp-node:local, the Dockerfile's `prebuilt` target around the binary
#     given as $1 (always rebuilt: the binary changes).
# Needs podman and mmdebstrap (tests/run-all.sh installs them) and
# CONTAINERS_CONF (tests/containers/run.sh sets it).
set -euo pipefail
cd "$(dirname "$0")/../.."
BINARY=${1:?usage: images.sh path/to/mcp-node}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"

has_image() { podman image exists "$1"; }

if ! has_image debian:bookworm-slim; then
  echo "== mmdebstrap debian:bookworm-slim"
  mmdebstrap --quiet --variant=minbase bookworm "$WORK/base.tar"
  podman import --quiet --change 'CMD ["bash"]' "$WORK/base.tar" debian:bookworm-slim >/dev/null
  rm -f "$WORK/base.tar"
fi

if ! has_image mcp-test-services; then
  echo "== mmdebstrap mcp-test-services"
  mmdebstrap --quiet --variant=minbase \
    --include=ca-certificates,redis-server,redis-tools,nginx-light,prometheus,python3,wget,openssl \
    bookworm "$WORK/services.tar"
  podman import --quiet --change 'CMD ["bash"]' "$WORK/services.tar" mcp-test-services >/dev/null
  rm -f "$WORK/services.tar"
fi

for target in redis nginx prometheus; do
  tag=$(sed -n "s/^# tag $target: //p" tests/containers/services.Containerfile)
  if ! has_image "$tag"; then
    echo "== $tag"
    podman build --quiet --pull=never --target "$target" -t "$tag" \
      -f tests/containers/services.Containerfile tests/containers >/dev/null
  fi
done

echo "== mcp-node:local from $BINARY"
rm -rf "$WORK/node-context"
mkdir -p "$WORK/node-context"
cp "$BINARY" "$WORK/node-context/mcp-node"
podman build --quiet --pull=never --format docker --target prebuilt -t mcp-node:local -f Dockerfile "$WORK/node-context" >/dev/null
rm -rf "$WORK/node-context"
