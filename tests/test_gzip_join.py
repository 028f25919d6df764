"""The /metrics body's gzip stream, joined from deflate segments compressed apart (lagwatch.serve.gzip_join)."""

from __future__ import annotations

import gzip
import zlib

from hypothesis import example, given
from hypothesis import strategies as st

from lagwatch.serve import gzip_join


@given(st.binary(max_size=3000), st.binary(max_size=3000))
@example(b"", b"")
@example(b"a", b"")
@example(b"", b"b" * 70000)
def test_crc32_combine_is_the_crc_of_the_concatenation(a: bytes, b: bytes) -> None:
    assert gzip_join.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_crc32_combine_over_lengths_beyond_32_bits_of_bits() -> None:
    # A length of 2**29 bytes or more needs every power in the table: checked against zlib on zeros.
    zeros = bytes(2**29 + 7)
    assert gzip_join.crc32_combine(zlib.crc32(b"x"), zlib.crc32(zeros), len(zeros)) == zlib.crc32(
        zeros, zlib.crc32(b"x")
    )


_text = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda line, n: line * n, st.binary(min_size=1, max_size=60), st.integers(0, 3000)),  # up to 180 KB
)
_piece = st.tuples(st.sampled_from(["text", "segment"]), st.lists(_text, max_size=4))


def _segment(chunks: list[bytes]) -> gzip_join.Segment:
    """As a family is compressed while it is rendered: chunk by chunk, then a sync flush."""
    c = gzip_join.compressor()
    data = b"".join(c.compress(chunk) for chunk in chunks) + c.flush(zlib.Z_SYNC_FLUSH)
    text = b"".join(chunks)
    return gzip_join.Segment(data, zlib.crc32(text), len(text))


@given(st.lists(_piece, max_size=8), st.binary(max_size=500))
@example([("segment", [b"a" * 100_000]), ("text", [b"b"]), ("segment", [b"c" * 70_000, b"d"])], b"tail")
def test_joined_pieces_are_one_gzip_stream_of_their_text_then_the_tail(
    pieces: list[tuple[str, list[bytes]]], tail: bytes
) -> None:
    joiner = gzip_join.Joiner()
    expected = []
    for kind, chunks in pieces:
        if kind == "segment":
            joiner.add_segment(_segment(chunks))
        else:
            for chunk in chunks:
                joiner.add_text(chunk)
        expected.extend(chunks)
    body = joiner.join().gzip_with(tail)
    stream = zlib.decompressobj(wbits=31)  # checks the trailer's CRC and length
    assert stream.decompress(body) == b"".join(expected) + tail
    assert stream.eof and stream.unused_data == b""  # one gzip member, complete
    assert gzip.decompress(body) == b"".join(expected) + tail


def test_a_body_can_be_sent_with_different_tails() -> None:
    joined = gzip_join.Joiner()
    joined.add_text(b"# HELP x y\n")
    joined.add_segment(_segment([b"x 1\n" * 5000]))
    body = joined.join()
    assert gzip.decompress(body.gzip_with(b"z 1\n")).endswith(b"x 1\nz 1\n")
    assert gzip.decompress(body.gzip_with(b"")) == b"# HELP x y\n" + b"x 1\n" * 5000
