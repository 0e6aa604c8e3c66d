"""Readers of logged streams: each yields validated chunks of bounded size, any number of
times."""

from .base import LogReader, chunk_size_for
from .kafka_log import KafkaLogReader
from .obd import ObdReader
from .service_jsonl import ServiceJsonlReader
from .tabular import ColumnMapping, CsvReader, ParquetReader

__all__ = [
    "ColumnMapping",
    "CsvReader",
    "KafkaLogReader",
    "LogReader",
    "ObdReader",
    "ParquetReader",
    "ServiceJsonlReader",
    "chunk_size_for",
]
