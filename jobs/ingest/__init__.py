"""How an append's input reaches its partitions' tasks, without a shuffle (issue 14).

- `columns`: Spark's Kafka sink columns, the types each may have, and the schema rows are staged in;
- `parquet`: Parquet input read by pyarrow in the input tasks, in row-group splits sized as Spark sizes file
  splits (`spark.sql.files.maxPartitionBytes`, `openCostInBytes`);
- `assign`: the producer's partition of each record (murmur2 of the key, sticky runs for null keys) and its
  topic-partition index `_tp`;
- `stage`: an input task's rows staged by topic-partition (`engine.ops.append_staging`), and the append tasks
  that read them back: one per selected partition.
"""
