# minibroker: one image for every node role; the properties file chooses the role.
#
#   docker build -t minibroker .
#   docker run -p 9092:9092 minibroker         # a single node that is its own controller
#   docker compose up                          # a controller, 3 brokers and Prometheus

# The build stage installs the project (the one import name `minibroker`, with its Spark data
# source, whose PySpark extra the image does not install) into a virtualenv, so the runtime stage copies one
# directory and carries no pip cache, build backend or source tree. The secure-dev extra
# (cryptography) makes the throwaway certificates of docker-compose.secure.yml and
# `minibroker dev --secure`.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY storage ./storage
COPY broker ./broker
COPY minibroker_spark ./minibroker_spark
RUN python -m venv /opt/minibroker \
    && /opt/minibroker/bin/pip install --no-cache-dir ".[secure-dev]"

FROM python:3.11-slim
# The same base image, so the virtualenv's interpreter links stay valid.
COPY --from=build /opt/minibroker /opt/minibroker
ENV PATH=/opt/minibroker/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# A fixed uid lets operators chown host directories mounted as the data volume.
RUN groupadd --system --gid 10001 minibroker \
    && useradd --system --uid 10001 --gid minibroker --no-create-home minibroker \
    && mkdir -p /var/lib/minibroker /etc/minibroker \
    && chown minibroker:minibroker /var/lib/minibroker
USER 10001:10001
# Properties files are mounted here and named relative to it (docker-compose.yml).
WORKDIR /etc/minibroker
VOLUME /var/lib/minibroker
EXPOSE 9092 9404
# Ready means answering ApiVersions and Metadata, which a broker does only once it has joined
# the cluster; a node serving other ports overrides the check (as docker-compose.yml does).
HEALTHCHECK --interval=5s --timeout=6s --start-period=10s --retries=3 \
    CMD ["minibroker", "probe", "--bootstrap", "127.0.0.1:9092", "--timeout", "5"]
ENTRYPOINT ["minibroker", "serve"]
# Without a properties file: one node that is its own controller, reachable from the host
# through a published port 9092.
CMD ["--override", "listeners=PLAINTEXT://0.0.0.0:9092", \
     "--override", "advertised.listeners=PLAINTEXT://localhost:9092", \
     "--override", "log.dirs=/var/lib/minibroker"]
