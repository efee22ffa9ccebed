# tracevault services (sequencer, archiver, witness) and CLI in one image.
FROM python:3.11-slim
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tracevault ./tracevault
# gcc and OpenSSL's headers build the C paths (docs/log.md, "Archiver speed"; their SHA-256
# is libcrypto's, which the base image keeps), as dev/system-deps installs them for the demo;
# the build fails if one is missing rather than ship the slower Python paths. Then they leave.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev libssl-dev \
    && pip install --no-cache-dir . \
    && python -c "import sys; from tracevault import native; bad = {m: native.status(m) for m in native.EXTENSIONS if native.status(m) != 'loaded'}; sys.exit(f'C paths not built: {bad}' if bad else 0)" \
    && apt-get purge -y gcc libc6-dev libssl-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 tracevault \
    && mkdir -p /log-key /witness-key /agent-key /vkeys /witness-store \
    && chown tracevault: /log-key /witness-key /agent-key /vkeys /witness-store \
    && chmod 0700 /log-key /witness-key /agent-key
# docker-compose.yml mounts named volumes on these folders; Docker creates each from the folder
# here, so the volumes belong to the image's user and the key folders stay private to it.
USER tracevault
ENTRYPOINT ["tracevault"]
CMD ["--help"]
