"""Recordings: records kept on disk, in every format, behind one reader and one writer.

* ``native``: the native ``.rzr`` format, on ``blocks`` (framing, CRC, resynchronisation)
  and ``tables`` (columnar tables in a data block);
* ``parquet``: one Parquet file that Rezolus's viewer opens (``rezolus_names``: which of
  our metrics carry Rezolus's names), and Rezolus's own Parquet files, read back;
* ``ring``: the flight recorder's ring directory of native segments;
* ``triggers``: ``[[trigger]]`` rules the flight recorder checks each publish interval,
  and the windows around an incident they write;
* ``files``: the interface: ``read_records``, ``read_meta``, ``read_tables``,
  ``to_pandas`` read any of them; ``open_writer`` and ``write_recording`` write either
  format;
* the commands: ``recorder`` (``rezolus-ue record``) and ``dump``.
"""

from .files import (
    open_writer,
    read_meta,
    read_records,
    read_tables,
    to_pandas,
    write_recording,
)

__all__ = ["open_writer", "read_meta", "read_records", "read_tables", "to_pandas",
           "write_recording"]
