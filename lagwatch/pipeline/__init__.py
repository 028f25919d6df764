"""EDGE (the `spark` extra): the data pipeline's Spark jobs. Imports pyspark lazily: the daemon never
needs a JVM."""
