"""The Spark adapter: with :mod:`pyspark_gazette.quickstart.spark_job`, the only code that imports pyspark."""
