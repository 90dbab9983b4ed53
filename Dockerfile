# syntax=docker/dockerfile:1
# One image per role, from one build:
#   runtime  replication-node, guarantee-api and mrs (no Java)
#   spark    spark-metrics (the runtime plus a Java runtime and PySpark)
# Build (needs a Docker engine; CI does not build it, it only checks this file):
#   docker build --target runtime -t dag-replication:0.1.0 .
#   docker build --target spark   -t dag-replication-spark:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: wheels of the project and of everything it depends on -----------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md and the packages.
COPY . .
RUN pip wheel --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels-spark '.[spark]'

# ---- runtime: the nodes, the guarantee API and the mover ---------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --gid 10001 dag \
 && useradd --uid 10001 --gid dag --home-dir /var/lib/dag --create-home --shell /usr/sbin/nologin dag
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels dag-replication && rm -rf /wheels
WORKDIR /var/lib/dag
USER 10001:10001
EXPOSE 7100 7200 7201
ENTRYPOINT ["replication-node"]
CMD ["--help"]

# ---- spark: spark-metrics aggregate|report (a Java runtime for PySpark) -----------------
FROM runtime AS spark
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels-spark /wheels
RUN pip install --no-index --find-links /wheels 'dag-replication[spark]' && rm -rf /wheels
ENV JAVA_HOME=/usr/lib/jvm/default-java
USER 10001:10001
ENTRYPOINT ["spark-metrics"]
CMD ["--help"]
