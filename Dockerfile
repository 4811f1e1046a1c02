# Builds the `sluice` binary and the seed-workload demo (`sluice-demo`), and a small runtime image.
FROM rust:1-bookworm AS build
# librdkafka (in sluice-demo) is built from source with cmake, with TLS and SASL/SCRAM from
# the system's OpenSSL.
RUN apt-get update && apt-get install -y --no-install-recommends cmake libssl-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p sluice-broker --bin sluice -p sluice-demo --bin sluice-demo

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends zlib1g libssl3 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
COPY --from=build /src/target/release/sluice-demo /usr/local/bin/sluice-demo
VOLUME /var/lib/sluice
EXPOSE 9092 9093
ENTRYPOINT ["sluice", "--data-dir", "/var/lib/sluice"]
# A single node reachable from the host with `docker run -p 9092:9092`; docker-compose.yml
# replaces this with named listeners.
CMD ["--listen", "0.0.0.0:9092", "--advertise", "localhost:9092"]
