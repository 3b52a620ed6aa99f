"""The two formats of a cost profile: the `ProfiledInstructionsProto` that JAX's converter
hands out (its wire format, decoded without protobuf) and the text proto XLA reads
(`costs { name: "..." cost_us: ... }`). Standard library only."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """One instruction's measured cost: its name in the optimised HLO, in microseconds."""

    name: str
    cost_us: float



# --- ProfiledInstructionsProto's wire format ----------------------------------------------------

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it; ValueError when cut short."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError(f"truncated varint at byte {pos}")
        if shift >= 70:
            raise ValueError(f"varint longer than 10 bytes at byte {pos}")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> Iterable[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of each field of one message: an int for a
    varint, the bytes otherwise. Raises ValueError for truncated data, a field number
    0 or a group or unknown wire type."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError(f"field number 0 at byte {pos}")
        value: bytes | int
        if wire == _VARINT:
            value, pos = _varint(data, pos)
        elif wire in (_FIXED64, _FIXED32, _LENGTH):
            if wire == _LENGTH:
                size, pos = _varint(data, pos)
            else:
                size = 8 if wire == _FIXED64 else 4
            if pos + size > len(data):
                raise ValueError(f"field {number}: truncated ({size} bytes from byte {pos}, "
                                 f"{len(data) - pos} left)")
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ValueError(f"field {number}: unsupported wire type {wire}")
        yield number, wire, value


def _instruction_cost(data: bytes) -> Cost:
    """One `InstructionCost {string name = 1; double cost_us = 2;}`; absent fields are
    proto3's defaults ("" and 0.0)."""
    name, cost = "", 0.0
    for number, wire, value in _fields(data):
        if number == 1 and wire == _LENGTH and isinstance(value, bytes):
            try:
                name = value.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"an instruction name is not UTF-8: {value!r}") from exc
        elif number == 2 and wire == _FIXED64 and isinstance(value, bytes):
            cost = struct.unpack("<d", value)[0]
    return Cost(name, cost)


def decode_profiled_instructions(data: bytes) -> list[Cost]:
    """The `costs` (field 1) of a serialized `ProfiledInstructionsProto`, in order.

    Standard library only: fields it does not know (`latencies`, field 2, and any
    other) are skipped. Raises ValueError for truncated or malformed data.
    """
    return [_instruction_cost(value) for number, wire, value in _fields(data)
            if number == 1 and wire == _LENGTH and isinstance(value, bytes)]


# --- the text proto XLA reads -------------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "r": "\r", "t": "\t"}
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_COST_LINE = re.compile(
    r'^\s*costs\s*\{\s*name:\s*"((?:[^"\\]|\\.)*)"\s+cost_us:\s*(' + _NUMBER + r")\s*\}\s*$")
_BYTE_ESCAPE = re.compile(r"[0-7]{1,3}|x[0-9A-Fa-f]{1,2}")


def _escape(name: str) -> str:
    """A string's text-format body: quotes, backslashes and control characters escaped."""
    return "".join(_ESCAPES.get(c) or (f"\\{ord(c):03o}" if ord(c) < 0x20 or ord(c) == 0x7F
                                       else c) for c in name)


def _unescape(body: str) -> str:
    r"""The inverse of `_escape`, also reading `\'`, `\xHH` and octal escapes of UTF-8
    bytes; ValueError for any other escape."""
    out = bytearray()
    pos = 0
    while pos < len(body):
        if body[pos] != "\\":
            out += body[pos].encode("utf-8")
            pos += 1
        elif body[pos + 1] in _UNESCAPES:
            out += _UNESCAPES[body[pos + 1]].encode("utf-8")
            pos += 2
        else:
            byte, pos = _byte_escape(body, pos + 1)
            out.append(byte)
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"escaped bytes that are not UTF-8 ({exc})") from exc


def _byte_escape(body: str, pos: int) -> tuple[int, int]:
    """The byte of the octal (`\\ooo`) or hex (`\\xHH`) escape at `pos` (after the
    backslash) and the position after it; ValueError for anything else."""
    match = _BYTE_ESCAPE.match(body, pos)
    if match is None:
        raise ValueError(f"unknown escape \\{body[pos]}")
    digits = match.group()
    byte = int(digits[1:], 16) if digits.startswith("x") else int(digits, 8)
    if byte > 0xFF:
        raise ValueError(f"escape \\{digits} is above one byte")
    return byte, match.end()


def render_pbtxt(costs: Sequence[Cost]) -> str:
    """The profile as XLA's text proto: one `costs { name: "..." cost_us: 12.5 }` line
    each, in the order given (quotes, backslashes and control characters in names
    escaped). Raises ValueError for a cost that is not finite."""
    lines = []
    for cost in costs:
        if not math.isfinite(cost.cost_us):
            raise ValueError(f"the cost of {cost.name!r} is not finite: {cost.cost_us!r}")
        lines.append(f'costs {{ name: "{_escape(cost.name)}" cost_us: {float(cost.cost_us)!r} }}')
    return "".join(line + "\n" for line in lines)


def parse_pbtxt(text: str) -> list[Cost]:
    """The costs of a profile in the form `render_pbtxt` writes (blank lines and `#`
    comments allowed), in order.

    Raises:
        ValueError: any other line, named by its number (from 1) and its text.
    """
    costs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _COST_LINE.match(line)
        try:
            if match is None:
                raise ValueError('expected costs { name: "..." cost_us: N }')
            costs.append(Cost(_unescape(match.group(1)), float(match.group(2))))
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}: {line.strip()!r}") from exc
    return costs


