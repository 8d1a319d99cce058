# The mcp-node image: a static-enough release build on Debian slim, non-root.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p mcp-node \
    && cp target/release/mcp-node /mcp-node

FROM debian:bookworm-slim
# The public roots (Debian's ca-certificates): the slim base has none, and
# the node trusts only the system's, so without them every https issuer
# (Keycloak, Auth0, Entra ID) and every rediss:// server with a public CA
# fails with UnknownIssuer.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home mcp
COPY --from=build /mcp-node /usr/local/bin/mcp-node
USER 10001
# Inside a container the node listens on every interface; the published port
# and MCP_ALLOWED_HOSTS decide who may reach it.
ENV MCP_BIND=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/mcp-node"]
