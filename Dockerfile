# tracevault services (sequencer, archiver) and CLI in one image.
FROM python:3.11-slim
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tracevault ./tracevault
RUN pip install --no-cache-dir . && useradd --system --uid 10001 tracevault
USER tracevault
ENTRYPOINT ["tracevault"]
CMD ["--help"]
