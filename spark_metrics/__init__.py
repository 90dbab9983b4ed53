"""spark_metrics: the PySpark pipeline over the guarantee service's queue-length history."""
