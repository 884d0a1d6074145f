# Airflow 3.3 with this project installed, for docker-compose.yaml.
# Java runs spark-submit's driver (client mode against the standalone Spark master); the Delta jars are
# resolved from Maven Central at build time into /opt/cdc/.cache/ivy, so runs never download.
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}

USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless procps gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/default-java

COPY --chown=airflow:root . /opt/cdc
USER airflow
# Keep the image's Airflow version (AIRFLOW_VERSION is set by the base image); editable, so the
# project root (/opt/cdc) is where cdc_core finds spark_apps/ and the jar cache. The editable install
# builds the binlog decoder's compiled row walk (setup.py; gcc above, headers from the Python image).
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -e /opt/cdc \
 && PYTHON="$(command -v python)" /opt/cdc/scripts/fetch_jars.sh
ENV CDC_IVY_DIR=/opt/cdc/.cache/ivy
WORKDIR /opt/cdc
