# Flow's services (flowd) and CLI (flow), FROM scratch: nothing is pulled from a registry.
# Built by scripts/images.sh (make images) with bin/linux/ as the context, after it built the
# static binaries there. Run a service with its role as the command:
#
#   docker run flowrun/flow:dev worker            # flowd worker
#   docker run --entrypoint /flow flowrun/flow:dev runs
#
# The health check of a service is `/flowd health http://127.0.0.1:PORT/readyz` (no shell here).
FROM scratch
ARG VERSION=unknown
ARG REVISION=unknown
ARG TITLE=Flow
ARG SOURCE=https://github.com/flowrun/flow
LABEL org.opencontainers.image.title="$TITLE" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="$SOURCE"
# The system's certificate authorities, for NATS servers whose certificates a public CA signs
# (give a private CA with FLOW_NATS_TLS_CA).
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# /tmp and /data belong to the user (a COPY cannot keep mode 1777 on scratch); a named volume
# mounted on /data takes that ownership when it is first mounted.
COPY --chown=65532:65532 tmp /tmp
COPY --chown=65532:65532 empty /data
COPY flowd flow /
USER 65532:65532
ENTRYPOINT ["/flowd"]
CMD ["worker"]
