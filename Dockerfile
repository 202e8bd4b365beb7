# The detd container image: the daemon, detctl, libdetd, the tables and the
# detd Python package (with its libdetd, for training pods that copy it; see
# deploy/kubernetes/sidecar-pod.yaml).
#
#   docker build -t detd:0.1.0 .
#
# The manifests in deploy/kubernetes use the image detd:0.1.0 and run it as
# uid/gid 10001. The configuration is not part of the image: mount a detd.conf
# at /etc/detd/detd.conf (the ConfigMap in deploy/kubernetes/configmap.yaml),
# or replace the arguments.

# ---- build ---------------------------------------------------------------
FROM debian:12-slim AS build
# The same package list as a developer machine and CI.
COPY scripts/setup-deps.sh /src/scripts/setup-deps.sh
RUN /src/scripts/setup-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/usr -DDETD_BUILD_TESTS=OFF \
 && cmake --build /build -j"$(nproc)" \
 && DESTDIR=/staging cmake --install /build \
 && install -d /staging/usr/share/detd/tables \
 && cp -a /src/tables/. /staging/usr/share/detd/tables/ \
 && install -d /staging/usr/lib/detd/python/detd/_lib \
 && cp -a /src/client/python/detd/*.py /staging/usr/lib/detd/python/detd/ \
 && cp -L /build/client/libdetd.so /staging/usr/lib/detd/python/detd/_lib/libdetd.so

# ---- runtime -------------------------------------------------------------
FROM debian:12-slim
# Runtime libraries only (Debian 12 package names): gRPC core, protobuf-c,
# libuv, SQLite, jansson, systemd notify, the metrics HTTP server.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates \
        libgrpc29 \
        libprotobuf-c1 \
        libuv1 \
        libsqlite3-0 \
        libjansson4 \
        libsystemd0 \
        libmicrohttpd12 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 detd \
 && useradd --system --uid 10001 --gid detd --no-create-home \
        --home-dir /var/lib/detd --shell /usr/sbin/nologin detd \
 && install -d -o detd -g detd -m 0750 /var/lib/detd /run/detd
COPY --from=build /staging/ /
RUN ldconfig
LABEL org.opencontainers.image.title="detd" \
      org.opencontainers.image.description="Identical GPU kernel configurations on every rank" \
      org.opencontainers.image.version="0.1.0"
USER 10001:10001
# 7070: --listen (Admin API, gRPC health); 9464: --metrics (Prometheus).
EXPOSE 7070 9464
ENTRYPOINT ["/usr/bin/detd"]
CMD ["--config", "/etc/detd/detd.conf"]
