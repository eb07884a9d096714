# nats-server at the version Flow's go.mod requires, FROM scratch, with /flowd for its health
# check (`/flowd health http://127.0.0.1:8222/healthz`; there is no shell). Built by
# scripts/images.sh (make images) with bin/linux/ as the context. JetStream keeps its files in
# /data, which belongs to the image's user so that a named volume mounted there does too.
#
#   docker run -v nats-data:/data flowrun/nats:dev -js -sd /data
FROM scratch
ARG VERSION=unknown
ARG REVISION=unknown
ARG TITLE=NATS server for Flow
ARG SOURCE=https://github.com/flowrun/flow
LABEL org.opencontainers.image.title="$TITLE" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="$SOURCE"
# /tmp and /data belong to the user (a COPY cannot keep mode 1777 on scratch); a named volume
# mounted on /data takes that ownership when it is first mounted.
COPY --chown=65532:65532 tmp /tmp
COPY --chown=65532:65532 empty /data
COPY nats-server flowd /
USER 65532:65532
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["-js", "-sd", "/data", "-m", "8222"]
