"""Read a Delta table with Spark and delta-spark (the pinned `delta-spark` JVM set), in a process of its own.

The test suite's shared Spark session has no Delta jars (klake needs none); this child starts a session
with them, as a cluster that has delta-spark would, and answers each query given as JSON on the command
line: `{"sql": "... {table} ..."}` (`{table}` becomes ``delta.`<path>` ``) or `{"version": N}` (the whole
table as of version N, `versionAsOf`). It prints one JSON document: a list of row lists, per query.
An `s3://` table is read through hadoop-aws as `s3a://` (the classpath holds the `hadoop-aws` set), from the
endpoint and credentials klake itself reads from the environment (`KLAKE_S3_ENDPOINT_URL`, `AWS_*`).

Usage: python tests/oracles/delta_spark_reader.py CLASSPATH TABLE_PATH QUERY_JSON...
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession


def main(argv: list[str]) -> int:
    classpath, path, *queries = argv
    builder = SparkSession.builder
    if path.startswith("s3://"):
        path = "s3a://" + path.removeprefix("s3://")
        for key, value in {"endpoint": os.environ["KLAKE_S3_ENDPOINT_URL"], "path.style.access": "true",
                           "connection.ssl.enabled": "false", "endpoint.region": os.environ["AWS_REGION"],
                           "access.key": os.environ["AWS_ACCESS_KEY_ID"],
                           "secret.key": os.environ["AWS_SECRET_ACCESS_KEY"],
                           "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}.items():
            builder = builder.config(f"spark.hadoop.fs.s3a.{key}", value)
    spark = (builder.master("local[1]").appName("delta-spark-oracle")
             .config("spark.jars", ",".join(classpath.split(os.pathsep)))
             .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
             .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    answers = []
    for text in queries:
        query = json.loads(text)
        if "version" in query:
            frame = spark.read.format("delta").option("versionAsOf", query["version"]).load(path)
        else:
            frame = spark.sql(query["sql"].format(table=f"delta.`{path}`"))
        answers.append([row.asDict() for row in frame.collect()])
    print(json.dumps(answers, default=str))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
