"""hoodie-stream: Apache Hudi merge-on-read tables from Spark Structured Streaming."""
