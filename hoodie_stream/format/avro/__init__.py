"""Avro as Hudi writes it: table schemas and their Arrow forms, the record encoder and decoder, schema conforming, and the timeline's Avro models."""
