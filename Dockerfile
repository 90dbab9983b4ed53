# syntax=docker/dockerfile:1
# One image per role, from one build:
#   runtime  replication-node, guarantee-api, mrs, transport and imap-front (no Java, no Spark)
#   spark    spark-metrics (the runtime plus a Java runtime, PySpark, pandas, matplotlib)
# `make image` builds both with podman from a Debian base made on the machine (no registry
# needed: tools/build_image.py); with Docker and a registry:
#   docker build --target runtime -t dag-replication:0.1.0 .
#   docker build --target spark   -t dag-replication-spark:0.1.0 .
# The base must provide pip, groupadd/useradd and (for spark) apt-get, as the public one does.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: wheels of the project and of everything it depends on -----------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md and the packages.
COPY . .
# One directory for both images: each installs from it only what it asks for.  pip's cache
# is a cache mount (kept between builds, in no layer): a changed source does not download
# and build PySpark's 450 MB again.
RUN --mount=type=cache,target=/root/.cache/pip pip wheel --wheel-dir /wheels '.[spark]'

# ---- runtime: the nodes, the guarantee API, the mover, the transport and the IMAP front -
FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --gid 10001 dag \
 && useradd --uid 10001 --gid dag --home-dir /var/lib/dag --create-home --shell /usr/sbin/nologin dag
# The wheels are mounted, not copied: a COPY would stay in its layer after the rm.  In the
# same layer (a later one would only hide them): pyarrow's own test suite and C++ headers,
# 12 MB that no process here runs or compiles against.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels dag-replication \
 && python3 -c "import pathlib, shutil, pyarrow; \
[shutil.rmtree(pathlib.Path(pyarrow.__file__).parent / d) for d in ('tests', 'include')]"
# The standard library's bytecode, which the base leaves out (as Debian's and the official
# slim images do): the pods' root is read-only, so without it every command compiled what
# it imports at each start (`replication-node status` in a pod: 0.55 s, bench/README.md
# cli_start).  Test data that is not Python on purpose is passed over.
RUN python3 -m compileall -q -j 0 -x '/(test|tests)/' /usr/lib/python3.11 > /dev/null
WORKDIR /var/lib/dag
USER 10001:10001
EXPOSE 7100 7200 7201 7301 7400 2424 2525 1143 1993 7500
ENTRYPOINT ["replication-node"]
CMD ["--help"]

# ---- spark: spark-metrics aggregate|report (a Java runtime for PySpark) -----------------
FROM runtime AS spark
USER root
# The JRE's postinst links its manual into man1, which a slim base may not have.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels 'dag-replication[spark]'
ENV JAVA_HOME=/usr/lib/jvm/default-java
USER 10001:10001
ENTRYPOINT ["spark-metrics"]
CMD ["--help"]
