"""Base files: Parquet as Hudi writes it, with its bloom filter and key range footers."""
