# Multi-stage build: a locked release build, then a slim runtime image as a non-root user.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
# The tests' support crate: a member of the workspace, so cargo reads its manifest.
COPY tests/support ./tests/support
RUN cargo build --release --locked --bin mailsluice

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/mailsluice --create-home mailsluice
COPY --from=build /src/target/release/mailsluice /usr/local/bin/mailsluice
COPY config/container.toml /etc/mailsluice/mailsluice.toml
# spool/: where a [spool] may live (a volume mounted there starts owned by mailsluice).
RUN mkdir -p /var/lib/mailsluice/outbox /var/lib/mailsluice/spool && chown -R mailsluice /var/lib/mailsluice
USER mailsluice
WORKDIR /var/lib/mailsluice
# Mount your own config over /etc/mailsluice; the default writes to the outbox volume.
VOLUME ["/var/lib/mailsluice/outbox"]
ENV MAILSLUICE_CONFIG=/etc/mailsluice/mailsluice.toml
# SMTP, and the admin endpoint (health, metrics, status page).
EXPOSE 2525 9325
ENTRYPOINT ["/usr/local/bin/mailsluice"]
