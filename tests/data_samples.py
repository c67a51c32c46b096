"""Hand-written raw files with every bad-row kind, and the counts a reader must report."""

from __future__ import annotations

# One line per case; the comment is the reason code the reader must give (or what it keeps).
BAD_TSV_LINES: list[bytes] = [
    "\ufeffsource\ttarget\tgroup".encode(),  # 1 header behind a BOM: bom-stripped (altered)
    b"cat\tK AE T\tg1",                          # 2 kept
    b"dog\tD AO G\tg2\r",                        # 3 kept, crlf-stripped (altered)
    b"caf\xe9\tK AE F\tg3",                      # 4 invalid-utf8 (Latin-1 byte)
    b"one\ttwo",                                 # 5 wrong-field-count (2 of 3)
    b"\tX\tg4",                                  # 6 empty-source
    b"y\t\tg4",                                  # 7 empty-target
    b"   \tX\tg4",                               # 8 whitespace-only-source
    "z\t \u00a0\tg4".encode(),                   # 9 whitespace-only-target (NBSP)
    b"a\x07b\tX\tg4",                            # 10 control-chars-source (BEL)
    b"cat\tK AE T\tg1",                          # 11 duplicate
    b"CAT\tK AE T\tg1",                          # 12 duplicate once the source is case-folded
    b"cat\tK AA T\tg1",                          # 13 kept: a variant of line 2
    b"",                                         # 14 blank-line (ignored)
    "a\u2581b\tX\tg4".encode(),                  # 15 reserved-char-source (SentencePiece's meta)
    b"<s> and </s>\t<pad> <unk>\tg5",            # 16 kept: spells special tokens
    "\ufb01sh\tF IH SH SH\t".encode(),           # 17 kept: NFKC 'fish' (altered), group = source
]
BAD_TSV = b"\n".join(BAD_TSV_LINES) + b"\n"

BAD_TSV_KEPT_LINES = [2, 3, 13, 16, 17]
BAD_TSV_COUNTS = {
    "dropped": {"control-chars-source": 1, "duplicate": 2, "empty-source": 1, "empty-target": 1,
                "invalid-utf8": 1, "reserved-char-source": 1, "whitespace-only-source": 1,
                "whitespace-only-target": 1, "wrong-field-count": 1},
    "altered": {"bom-stripped": 1, "crlf-stripped": 1, "nfkc-changed-source": 1},
    "ignored": {"blank-line": 1},
}
#: (line, reason) of every dropped row, in file order.
BAD_TSV_DROPPED = [(4, "invalid-utf8"), (5, "wrong-field-count"), (6, "empty-source"),
                   (7, "empty-target"), (8, "whitespace-only-source"),
                   (9, "whitespace-only-target"), (10, "control-chars-source"),
                   (11, "duplicate"), (12, "duplicate"), (15, "reserved-char-source")]

BAD_JSONL_LINES = [
    '{"source": "cat", "target": "K AE T", "id": "c1"}',   # 1 kept
    '{"source": "dog", "target": ',                        # 2 invalid-json
    '{"source": "x"}',                                     # 3 wrong-field-count (missing)
    '{"source": "x", "target": "y", "extra": "1"}',        # 4 wrong-field-count (unknown)
    '{"source": 1, "target": "y"}',                        # 5 non-string-field
    '{"source": "a\\tb", "target": "y"}',                  # 6 control-chars-source (TAB)
    '{"source": "dog", "target": "D AO G", "id": "c1"}',   # 7 duplicate-id
    '{"source": "</s>", "target": "<unk>", "group": "s"}', # 8 kept
    '{"source": "Cat", "target": "K AE T"}',               # 9 duplicate (source case-folded)
    '{"source": "", "target": "y"}',                       # 10 empty-source
    '{"source": "y", "target": "\\u2581"}',                # 11 reserved-char-target
    '{"source": "y", "target": "\\u0000"}',                # 12 control-chars-target
]
BAD_JSONL = ("\n".join(BAD_JSONL_LINES) + "\n").encode()
BAD_JSONL_KEPT_LINES = [1, 8]
BAD_JSONL_DROPPED = [(2, "invalid-json"), (3, "wrong-field-count"), (4, "wrong-field-count"),
                     (5, "non-string-field"), (6, "control-chars-source"), (7, "duplicate-id"),
                     (9, "duplicate"), (10, "empty-source"), (11, "reserved-char-target"),
                     (12, "control-chars-target")]
