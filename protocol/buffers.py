"""The buffer types the protocol and storage code read from and write into.

A frame arrives as a ``bytearray`` (the server reads into one), requests and segments are
looked at through ``memoryview`` slices so that nothing is copied, and tests and encoders hand
``bytes``. Code that only reads takes any of them (``Buffer``); code that patches a batch in
place (offsets, LogAppendTime, the CRC) needs a ``WritableBuffer``. mypy no longer treats
``bytearray`` and ``memoryview`` as ``bytes`` (its strict_bytes), so these are spelled out.
"""

from typing import TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview
WritableBuffer: TypeAlias = bytearray | memoryview
