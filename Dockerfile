# The mcp-node image: a release build on Debian slim, run as a non-root user.
#
#   docker build -t mcp-node .                       # builds the binary in the image
#   docker build --target prebuilt -t mcp-node DIR   # DIR holds an mcp-node built elsewhere
#   docker build --target prebuilt --build-arg BINARY=my-tools -t my-tools DIR
#                                                    # a provider's binary (mcp_cluster::cli)
#
# The second form takes a binary built for Debian bookworm (glibc 2.36 or
# older) on another machine or in CI: `cargo build --release -p mcp-node`,
# then copy target/release/mcp-node alone into an empty DIR (the repository's
# .dockerignore leaves target/ out of the context) and pass this file with
# `-f Dockerfile`. Both forms give the same runtime stage.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p mcp-node \
    && cp target/release/mcp-node /mcp-node

FROM debian:bookworm-slim AS runtime
# The public roots (Debian's ca-certificates): the slim base has none, and
# the node trusts only the system's, so without them every https issuer
# (Keycloak, Auth0, Entra ID) and every rediss:// server with a public CA
# fails with UnknownIssuer. A private CA: README, "Containers".
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 mcp \
    && useradd --system --uid 10001 --gid 10001 --no-create-home mcp
USER 10001:10001
# Inside a container the node listens on every interface; the published port
# and MCP_ALLOWED_HOSTS decide who may reach it.
ENV MCP_BIND=0.0.0.0:8080
EXPOSE 8080
# Alive: /healthz answers 200 on the admin listener (MCP_ADMIN_BIND), else on
# the main one; it never depends on Redis, so an orchestrator that replaces
# unhealthy containers never does so because Redis is away. bash's /dev/tcp:
# the image carries no HTTP client. It reaches 127.0.0.1 at the port of that
# address: keep the listener on 0.0.0.0, [::] or 127.0.0.1, and with HTTPS on
# the main listener give the node an admin listener. Kept in Docker-format
# images (`podman build --format docker`); OCI images drop it.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "a=${MCP_ADMIN_BIND:-$MCP_BIND}; exec 3<>/dev/tcp/127.0.0.1/${a##*:} && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q '^HTTP/1.[01] 200' <&3"]
ENTRYPOINT ["/usr/local/bin/mcp-node"]

# A binary built elsewhere, from a context holding only it: mcp-node, or a
# provider's own program built on mcp_cluster::cli (--build-arg
# BINARY=my-tools), which takes the same flags and variables and so runs
# under the same entrypoint, compose file and chart.
FROM runtime AS prebuilt
ARG BINARY=mcp-node
COPY ${BINARY} /usr/local/bin/mcp-node

# The default target: the binary built above.
FROM runtime
COPY --from=build /mcp-node /usr/local/bin/mcp-node
