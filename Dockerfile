# Builds the `sluice` binary and a small runtime image.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p sluice-broker --bin sluice

FROM debian:bookworm-slim
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
VOLUME /var/lib/sluice
EXPOSE 9092 9093
ENTRYPOINT ["sluice", "--data-dir", "/var/lib/sluice"]
# A single node reachable from the host with `docker run -p 9092:9092`; docker-compose.yml
# replaces this with named listeners.
CMD ["--listen", "0.0.0.0:9092", "--advertise", "localhost:9092"]
