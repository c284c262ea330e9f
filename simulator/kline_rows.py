"""Binance's REST kline rows as text: one row (:func:`kline_row`), or a whole window's JSON body at once.

``GET /api/v3/klines`` answers up to a thousand 12-element rows.  Building a tuple and eight
strings per row and then serialising them was most of a request's CPU (issue 41), so
:func:`klines_body` writes the whole body from the window's numpy columns in one pass: every
number is laid out as ASCII digits four to a 32-bit word, with NUL bytes where a shorter number
leaves room, and the NULs are deleted at the end.  The text is exactly
``orjson.dumps([kline_row(k) for k in window])`` (tests/simulator/test_kline_rows.py).
Prices and volumes are ``%.8f``, the correctly rounded decimal of the binary value: a value whose
rounding the vectorised path cannot prove (its product by 10⁸ within an ulp of a half, negative,
huge or not finite; a negative time) sends the whole window to the plain path, row by row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import orjson

if TYPE_CHECKING:
    from simulator.market import Kline


def _words(texts: list[str]) -> np.ndarray:
    return np.frombuffer(b"".join(t.encode().rjust(4, b"\0") for t in texts), dtype=np.uint32)


_DIGITS4 = _words([f"{i:04d}" for i in range(10_000)])
"""The four ASCII digits of 0 … 9999 as one 32-bit word each: numbers are laid out four digits at a time."""
_LEADING4 = _words([str(i) if i else "" for i in range(10_000)])
_LEADING4_LAST = _words([str(i) for i in range(10_000)])
"""Leading words: no leading zeros (NUL bytes instead, deleted afterwards); the last keeps one digit."""
_INT_DOT = _words([f"{i}." for i in range(1000)])
"""0 … 999 and the decimal point in one word: a price or volume below 1000 is three words."""
_DOT, _COMMA = _words(["."])[0], _words([","])[0]
_MAX_INT = 10**16  # four words of digits
_SCALE = 100_000_000  # 10⁸: eight decimals
_TIE_MARGIN = 0.5 - 2.0**-25
"""Below 10⁸ a product by 10⁸ is within 2⁻²⁷ of the exact one, so it rounds to the exact one's
nearest integer unless it lies this far or farther from its own (a tie, or nearly: Python decides)."""

Words = np.ndarray | int
"""A column of words (one or more per row), or one word every row has (a separator)."""


def _int_words(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative integers below 10^(4·width) as ``width`` rows of words of digits, leading zeros as NULs."""
    if width == 1:
        return _LEADING4_LAST[values][None, :]
    out = np.empty((width, len(values)), dtype=np.uint32)
    if len(values) and int(values.min()) >= 10 ** (4 * (width - 1)):  # all as wide (open times): no leading words
        for j in range(width):
            group = values // 10 ** (4 * (width - 1 - j)) % 10_000 if j < width - 1 else values % 10_000
            out[j] = (_DIGITS4 if j else _LEADING4)[group]
        return out
    leading = np.ones(len(values), dtype=bool)
    for j in range(width):
        group = values // 10 ** (4 * (width - 1 - j)) % 10_000 if j < width - 1 else values % 10_000
        if j == width - 1:
            out[j] = np.where(leading, _LEADING4_LAST[group], _DIGITS4[group])
        else:
            out[j] = np.where(leading, _LEADING4[group], _DIGITS4[group])
            leading &= group == 0
    return out


def _width(largest: int) -> int:
    """Words of digits the largest of some non-negative integers needs (at least one)."""
    return max(1, -(-len(str(largest)) // 4))


def _fixed8(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each value's integer part, its eight decimals (below 10⁸), and whether both are ``%.8f``'s.

    Both are whole numbers held exactly as floats.  ``x − ⌊x⌋`` is exact; its product by 10⁸ is
    rounded to the integer ``%.8f`` rounds the exact binary value to, unless the product is too
    near a half to tell (then, or for a negative, huge or not finite value, the flag is False
    and the numbers are zeros).
    """
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = ~np.signbit(x) & (x < 2.0**53)  # NaN and infinities fail the comparison
        whole = np.floor(x)
        p = (x - whole) * 1e8
        decimals = np.rint(p)
        ok &= np.abs(p - decimals) < _TIE_MARGIN
        if not ok.all():
            whole, decimals = np.where(ok, whole, 0.0), np.where(ok, decimals, 0.0)
    carry = decimals == _SCALE  # .999999995 and up rounds to the next integer
    if carry.any():
        whole, decimals = whole + carry, np.where(carry, 0.0, decimals)
    return whole, decimals, ok


def _fixed8_words(whole: np.ndarray, decimals: np.ndarray, columns: int = 1) -> list[list[Words]]:
    """``whole.decimals`` as words for each of ``columns`` equal slices: integer digits and dot, then decimals."""
    n = len(whole) // columns
    high = np.floor(decimals / 10_000.0)  # exact: a quotient below 10⁴ is far nearer than 10⁻⁴ to the true one
    low = _DIGITS4[(decimals - high * 10_000.0).astype(np.intp)]
    high = _DIGITS4[high.astype(np.intp)]
    largest = whole.reshape(columns, n).max(axis=1).tolist() if n else [0.0] * columns
    int_dot = _INT_DOT[np.minimum(whole, 999.0).astype(np.intp)] if min(largest) < 1000 else high
    out: list[list[Words]] = []
    for c, top in enumerate(largest):
        at = slice(c * n, (c + 1) * n)
        if top < 1000:  # the integer part and the dot in one word
            out.append([int_dot[at], high[at], low[at]])
        else:
            out.append([_int_words(whole[at].astype(np.int64), _width(int(top))), int(_DOT), high[at], low[at]])
    return out


def _join(rows: int, parts: list[Words]) -> np.ndarray:
    """The words of every row, a row of the result per word position (writing whole rows is what numpy does fast)."""
    width = sum(1 if isinstance(p, int) or p.ndim == 1 else p.shape[0] for p in parts)
    out = np.empty((width, rows), dtype=np.uint32)
    at = 0
    for part in parts:
        if isinstance(part, int) or part.ndim == 1:
            out[at] = part
            at += 1
        else:
            out[at : at + part.shape[0]] = part
            at += part.shape[0]
    return out


def _text(words: np.ndarray) -> bytes:
    """The text of :func:`_join`'s words, row after row: transposed, NULs deleted."""
    return words.T.tobytes().translate(None, b"\0")


def format_8f(values: np.ndarray) -> list[str]:
    """``[f"{x:.8f}" for x in values]``, vectorised (the values :func:`_fixed8` cannot prove: by Python)."""
    whole, decimals, ok = _fixed8(values)
    if not len(whole):
        return []
    out = _text(_join(len(whole), [*_fixed8_words(whole, decimals)[0], int(_COMMA)])).decode("ascii").split(",")[:-1]
    for i in np.flatnonzero(~ok).tolist():
        out[i] = f"{float(values[i]):.8f}"
    return out


def _row(t0: int, t1: int, o: float, h: float, lo: float, c: float, v: float, n: int) -> tuple[object, ...]:
    taker = v * 0.5
    return (
        t0,
        f"{o:.8f}",
        f"{h:.8f}",
        f"{lo:.8f}",
        f"{c:.8f}",
        f"{v:.8f}",
        t1,
        f"{v * (o + c) / 2.0:.8f}",
        n,
        f"{taker:.8f}",
        f"{taker * (o + c) / 2.0:.8f}",
        "0",
    )


def kline_row(k: Kline) -> tuple[object, ...]:
    """Binance's 12-element REST row of one kline (quote volume and taker columns derived as Binance's are).

    A tuple: JSON writes it as the same array, and the garbage collector stops tracking a tuple
    of numbers and strings at its first collection.
    """
    return _row(k.open_time, k.close_time, k.open, k.high, k.low, k.close, k.volume, k.trades)


def _sep(text: str) -> int:
    return int(_words([text])[0])


_Q, _QCQ, _QC, _LAST = _sep(',"'), _sep('","'), _sep('",'), _sep('","0')
_ROW_END, _BODY_END = _sep('"],['), _sep('"]]')  # the next row's opening bracket rides on this one's end


def klines_body(
    open_times: np.ndarray,
    close_times: np.ndarray,
    opens: np.ndarray,
    highs: np.ndarray,
    lows: np.ndarray,
    closes: np.ndarray,
    volumes: np.ndarray,
    trades: np.ndarray,
) -> bytes:
    """``orjson.dumps([kline_row(k) for k in window])`` of the window given as columns, written in one pass."""
    n = len(open_times)
    if n == 0:
        return b"[]"
    o, c, v = (np.asarray(a, dtype=np.float64) for a in (opens, closes, volumes))
    with np.errstate(over="ignore", invalid="ignore"):  # inf and nan, as Python's floats give them
        taker = v * 0.5
        # the same float operations as kline_row's derived columns
        floats = np.concatenate((o, highs, lows, c, v, v * (o + c) / 2.0, taker, taker * (o + c) / 2.0))
    whole, decimals, ok = _fixed8(floats)
    ints = np.concatenate((open_times, close_times, trades)).astype(np.int64)
    if not ok.all() or int(ints.min()) < 0 or int(ints.max()) >= _MAX_INT:
        return _plain_body(open_times, close_times, opens, highs, lows, closes, volumes, trades)
    fo, fh, fl, fc, fv, fq, ftv, ftq = _fixed8_words(whole, decimals, 8)
    times = _int_words(ints[: 2 * n], _width(int(ints[: 2 * n].max())))
    t0, t1 = times[:, :n], times[:, n:]
    count = _int_words(ints[2 * n :], _width(int(ints[2 * n :].max())))
    # [t0,"o","h","l","c","v",t1,"q",n,"V","Q","0"]
    parts: list[Words] = [t0, _Q, *fo, _QCQ, *fh, _QCQ, *fl, _QCQ, *fc, _QCQ, *fv, _QC, t1, _Q, *fq]
    parts += [_QC, count, _Q, *ftv, _QCQ, *ftq, _LAST, _ROW_END]
    words = _join(n, parts)
    words[-1, -1] = _BODY_END
    return b"[[" + _text(words)


def _plain_body(*columns: np.ndarray) -> bytes:
    rows = zip(*(np.asarray(col).tolist() for col in columns), strict=True)
    return orjson.dumps([_row(*r) for r in rows])
