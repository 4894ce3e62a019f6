"""Helpers of the format with no Hudi concept of their own: Java properties files and date formats, Arrow string buffers and takes, runs of equal values."""
