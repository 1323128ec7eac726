# The operator image: a minimal runtime (distroless cc: glibc, no shell) running as
# a non-root user. Build: docker build -t homestead:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY .cargo .cargo
COPY crates crates
RUN cargo build --release --locked -p homestead --bins

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/homestead /usr/local/bin/homestead
# What the operator's Pods run: the operator alone, without the other commands' code.
COPY --from=build /src/target/release/homestead-operator /usr/local/bin/homestead-operator
USER 65532:65532
EXPOSE 8080 8443
ENTRYPOINT ["/usr/local/bin/homestead"]
