"""How an append's input reaches its partitions' tasks, without a shuffle (issue 14); `jobs.append` is the
job's shell.

- `source`: the input found, checked before anything is written and read with where each row comes from,
  and the job id it derives; `topics`: the topics it appends and their partition counts;
- `columns`: Spark's Kafka sink columns, the types each may have, and the schema rows are staged in;
- `parquet`: Parquet input read by pyarrow in the input tasks, in row-group splits sized as Spark sizes file
  splits (`spark.sql.files.maxPartitionBytes`, `openCostInBytes`);
- `assign`: the producer's partition of each record (murmur2 of the key, sticky runs for null keys) and its
  topic-partition index `_tp`;
- `stage`: an input task's rows staged by topic-partition (`engine.ops.append_staging`), the tasks' buffer
  sizes, and the append tasks that read them back: one per selected partition;
- `append_task`: an append task streaming its partitions' rows through the engine in chunks, its rejects
  written (`engine.ops.rejects`), and the driver's tally of the tasks' result rows.
"""
