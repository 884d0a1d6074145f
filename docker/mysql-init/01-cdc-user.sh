#!/bin/bash
# Run once by the mysql image's entrypoint on an empty data directory: the least-privilege
# replication user the pipelines connect as (password from CDC_MYSQL_PASSWORD, never in a file).
set -euo pipefail
mysql --protocol=socket -uroot -p"$MYSQL_ROOT_PASSWORD" <<SQL
CREATE USER IF NOT EXISTS 'cdc'@'%' IDENTIFIED BY '${CDC_MYSQL_PASSWORD}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'cdc'@'%';
CREATE DATABASE IF NOT EXISTS demo CHARACTER SET utf8mb4;
SQL
