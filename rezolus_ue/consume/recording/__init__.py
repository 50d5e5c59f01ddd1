"""Recordings: records kept on disk, in every format, behind one reader and one writer.

* ``blocks`` (framing, CRC, resynchronisation) < ``tables`` (columnar tables in a data
  block) < ``files`` (whole native recordings, output files): the native ``.rzr`` format;
* ``parquet``: Parquet recordings (pyarrow);
* ``ring``: the flight recorder's ring directory of native segments;
* the commands: ``recorder`` (``rezolus-ue record``) and ``dump``.

``read_records`` and ``read_meta`` read any of them (a file, a Parquet recording, a ring
directory); ``write_recording`` writes records in a chosen format.
"""

from .files import read_meta, read_records, read_tables, to_pandas, write_recording

__all__ = ["read_meta", "read_records", "read_tables", "to_pandas", "write_recording"]
