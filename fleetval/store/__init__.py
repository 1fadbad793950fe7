"""The Parquet store: one schema, the catalog of runs, the writer of rows, summaries and lateness."""
