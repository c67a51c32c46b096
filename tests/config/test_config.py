"""params.yaml loading: unknown keys, types, choices, ranges and cross-field rules are rejected,
each with one line naming the key, the value and what it must be."""

from __future__ import annotations

import dataclasses
import math
import shlex
import subprocess
import types
import typing
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from seqcore.config import Config, ConfigError, as_dict, config_from_dict, flatten, load_config
from seqcore.config_ranges import RANGES, in_range
from seqcore.config_rules import SS_CAP_WITH_SMOOTHING, risky_settings
from tests.factories import REPO
from tests.pipeline_helpers import merge, nested

RAW = yaml.safe_load((REPO / "params.yaml").read_text())
WRITTEN = flatten(RAW)


def test_repository_params_load_and_the_config_holds_every_value_written_there() -> None:
    loaded = flatten(as_dict(load_config(REPO / "params.yaml")))
    assert WRITTEN and set(WRITTEN) <= set(loaded)  # no key dropped or renamed on the way
    assert {k: loaded[k] for k in WRITTEN} == WRITTEN  # and no value coerced or replaced


#: The keys `pipeline.tune --write` set in params.yaml (issue 52); the code keeps the hand values
#: and ``tuned_on: none``, so a file without them is not labelled as tuned on dev.
TUNED = {"decode.beam_size": 1, "decode.alpha": 0.0, "decode.rescore_weight": 0.5,
         "decode.tuned_on": "dev"}


def test_code_defaults_equal_params_yaml() -> None:
    """One set of defaults (issue 11): params.yaml lists every leaf, each equal to the dataclass
    default except the tuned decode keys (``TUNED``)."""
    defaults = flatten(as_dict(Config()))
    assert sorted(WRITTEN) == sorted(defaults)
    assert {k: v for k, v in WRITTEN.items() if defaults[k] != v} == TUNED


@pytest.mark.parametrize("raw, message", [
    ({"train": {"max_stepz": 3}}, "train.max_stepz = 3: unknown key; did you mean "
                                  "train.max_steps?"),
    ({"trian": {"lr": 1.0}}, "trian = {...}: unknown key; did you mean train?"),
    ({"decode": {"strategy": "nucleus"}},
     "decode.strategy = 'nucleus': must be one of greedy, beam, sample"),
    ({"model": {"family": "tranformer"}}, "model.family = 'tranformer': must be one of "
                                          "transformer, gru, lstm; did you mean transformer?"),
    ({"train": {"batch_size": "32"}}, "train.batch_size = '32': expected int"),
    ({"train": {"lr": "fast"}}, "train.lr = 'fast': expected a number"),
    ({"train": {"betas": [0.9]}}, "train.betas = [0.9]: expected a list of 2 values"),
    ({"decode": {"strategy": "beam", "beam_size": 2, "n_best": 3}},
     "decode.n_best = 3: must be <= decode.beam_size (2)"),
    ({"tokenizer": {"pad_id": 3}}, "tokenizer.pad_id/unk_id/bos_id/eos_id = [3, 1, 2, 3]: "
                                   "must be distinct"),
    ({"data": {"source": "tsv"}}, "data.path = '': required when data.source is tsv"),
    ({"data": {"dev_fraction": 0.5, "test_fraction": 0.5}},
     "data.dev_fraction + data.test_fraction = 0.5 + 0.5: must be < 1"),
    ({"model": {"transformer": {"d_model": 130}}},
     "model.transformer.d_model = 130: must be divisible by model.transformer.n_heads (4)"),
    ({"decode": {"min_len": 40}}, "decode.min_len = 40: must be < decode.max_len (32)"),
    ({"evaluate": {"bucket_edges": [4, 4]}}, "evaluate.bucket_edges = [4, 4]: must be strictly "
     "increasing"),
    ({"evaluate": {"bucket_edges": "quintiles"}},
     "evaluate.bucket_edges = 'quintiles': must be a list or auto"),
    ({"data": {"source": "tsv", "path": "data/external/x.tsv", "keep_stress": True}},
     "data.keep_stress = True: applies to data.source cmudict only (any other source is "
     "read as it is: nothing to keep or strip)"),
    ({"decode": {"banned_tokens": [3]}}, "decode.banned_tokens = [3]: must not contain tokenizer."
     "eos_id (3)"),
    ({"train": {"ss_schedule": "exponential"}},
     "train.ss_k = 1000.0: must be in (0, 1) when train.ss_schedule is exponential"),
    ({"train": {"select": "best_dev_wer", "dev_decode_words": 0}},
     "train.select = 'best_dev_wer': needs dev decoding while training: set "
     "train.dev_decode_words > 0 (or use best_dev or last)"),
    ({"train": {"select": "best_wer"}}, "train.select = 'best_wer': must be one of best_dev, "
     "best_dev_wer, best_dev_per, last; did you mean best_dev_wer?"),
    ({"train": {"mrt_candidates": 1}}, "train.mrt_candidates = 1: must be >= 2"),
    # issue 53: what the step's CUDA graphs need
    ({"train": {"cuda_graphs": "on"}}, "train.device = 'cpu': train.cuda_graphs: on needs a "
     "CUDA device (cuda or auto)"),
    ({"train": {"cuda_graphs": "on", "device": "cuda", "amp": "fp16"}}, "train.amp = 'fp16': "
     "train.cuda_graphs: on needs none or bf16 (fp16's grad scaler decides on the host)"),
    ({"model": {"family": "gru"}, "train": {"cuda_graphs": "on", "device": "auto"}},
     "model.family = 'gru': train.cuda_graphs: on needs the transformer (the RNNs pack their "
     "batches by length on the host)"),
    ({"train": {"cuda_graphs": "always"}},
     "train.cuda_graphs = 'always': must be one of auto, on, off"),
    ([1, 2], "(whole file) = [1, 2]: expected a mapping of keys to values"),
    # the coverage guards' parameters (issue 13)
    ({"tokenizer": {"max_unk_rate": 1.5}}, "tokenizer.max_unk_rate = 1.5: must be in [0, 1]"),
    ({"sequence": {"max_drop_rate": -0.1}}, "sequence.max_drop_rate = -0.1: must be in [0, 1]"),
    ({"tokenizer": {"src_vocab_size": "big"}},
     "tokenizer.src_vocab_size = 'big': must be an integer or auto"),
    ({"tokenizer": {"tgt_vocab_size": 2}}, "tokenizer.tgt_vocab_size = 2: must be >= 5"),
    ({"data": {"min_split_rows": -1}}, "data.min_split_rows = -1: must be >= 0"),
])
def test_invalid_params_are_rejected_with_a_named_reason(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    assert str(err.value) == f"params: {message}"


def _numbers(hint: object) -> bool:
    """A number, or a list of numbers."""
    args = set(typing.get_args(hint)) - {Ellipsis}
    return hint in (int, float) or (typing.get_origin(hint) is tuple and bool(args)
                                    and args <= {int, float})


def _is_list(key: str) -> bool:
    """Whether the config field ``key`` takes a list (alone or beside a word such as auto)."""
    hint: object = Config
    for part in key.split("."):
        hint = typing.get_type_hints(hint)[part]
    return any(typing.get_origin(h) is tuple for h in (hint, *typing.get_args(hint)))


def _numeric_keys(cls: type = Config, prefix: str = "") -> set[str]:
    """Dotted names of every int/float field (tuples of numbers included) of the config tree."""
    keys: set[str] = set()
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(hint):
            keys |= _numeric_keys(hint, f"{prefix}{f.name}.")
        elif _numbers(hint) or (typing.get_origin(hint) in (typing.Union, types.UnionType)
                                and any(_numbers(a) for a in typing.get_args(hint))):
            keys.add(prefix + f.name)
    return keys


def test_every_numeric_parameter_has_a_range() -> None:
    assert set(RANGES) == _numeric_keys()


def _just_outside(interval: str, integer: bool) -> float:
    """The nearest value below the lower end of ``interval`` (an open end excludes itself)."""
    lo_open, lo = interval[0] == "(", float(interval[1:].split(",")[0])
    bad = lo if lo_open else lo - 1 if integer else lo - 0.5
    return int(bad) if integer else bad


@pytest.mark.parametrize("key", sorted(RANGES))
def test_each_numeric_parameter_rejects_a_value_below_its_range(key: str) -> None:
    default = flatten(as_dict(Config()))[key]
    listed = _is_list(key)
    first = default[0] if isinstance(default, list) and default else default
    integer = not isinstance(first, float)  # an empty list or a word (auto): integers
    bad = _just_outside(RANGES[key], integer)
    size = len(default) if isinstance(default, list) else 1
    shown = f"{key}[0]" if listed else key
    with pytest.raises(ConfigError) as err:
        config_from_dict(nested({key: [bad] * max(size, 1) if listed else bad}))
    assert str(err.value) == f"params: {shown} = {bad!r}: {in_range(bad, RANGES[key])}"


@pytest.mark.parametrize("value, interval, problem", [
    (0.0, "(0, inf)", "must be > 0"), (1e-12, "(0, inf)", None),
    (-1, "[0, inf)", "must be >= 0"), (0, "[0, inf)", None),
    (1.0, "[0, 1)", "must be in [0, 1)"), (0.0, "[0, 1)", None),
    (1.0, "(0, 1]", None), (0.0, "(0, 1]", "must be in (0, 1]"),
    (math.inf, "[1, inf)", "must be a finite number"),
    (math.nan, "(0, inf)", "must be a finite number"),
])
def test_interval_ends_are_open_or_closed_as_written(value: float, interval: str,
                                                     problem: str | None) -> None:
    assert in_range(value, interval) == problem


def test_a_file_error_is_one_line_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "params.yaml"
    bad.write_text("train:\n  lr: 1.0\n   warmup_steps: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert str(err.value) == (f"{bad}: not valid YAML at line 3, column 16: "
                              "mapping values are not allowed here")
    with pytest.raises(ConfigError, match=r"^\S+missing.yaml: cannot read \(No such file"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize("amp", ["bf16", "none"])
def test_the_full_profile_overrides_existing_keys_with_valid_values(amp: str) -> None:
    """`make full` (issue 28) is `dvc exp run -S key=value ...`: each key exists in params.yaml
    (a misspelt one would train the default's shape) and the result validates, either FULL_AMP."""
    # -o: the install stamp counts as up to date. (STAMP=Makefile, as before, made the install
    # rule remake a makefile, which make runs even under -n: a pip install inside the suite
    # whenever the clone's Makefile was older than requirements.lock.)
    dry = subprocess.run(["make", "-s", "-n", "full", f"FULL_AMP={amp}", "-o", ".venv/.installed"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert not any(line.startswith(("python", "pip", "touch")) or "pip install" in line
                   for line in dry.splitlines()), dry  # nothing but the profile's command
    words = shlex.split(next(line for line in dry.splitlines() if "dvc exp run" in line))
    flags, pairs = words[words.index("-S")::2], words[words.index("-S") + 1::2]
    assert set(flags) == {"-S"}  # nothing but overrides after the first
    overrides = {key: yaml.safe_load(value) for key, value in (p.split("=", 1) for p in pairs)}
    assert set(overrides) <= set(WRITTEN), set(overrides) - set(WRITTEN)
    cfg = config_from_dict(merge(RAW, nested(overrides)))
    shape = cfg.model.transformer
    assert (shape.enc_layers, shape.dec_layers, shape.d_model, shape.d_ff) == (3, 3, 256, 1024)
    assert cfg.train.amp == amp and cfg.train.max_steps == 12000
    # CPU bf16 is oneDNN's, which the portable profile cannot pin (issue 49)
    assert cfg.train.cpu_kernels == ("native" if amp == "bf16" else "portable")
    assert cfg.decode.rescore == "baseline"  # the profile rescores like the default


def test_label_smoothing_beside_scheduled_sampling_above_the_cap_gets_one_warning() -> None:
    cfg = load_config(REPO / "params.yaml")
    assert risky_settings(cfg) == []  # the default: no scheduled sampling
    ss = replace(cfg, train=replace(cfg.train, ss_schedule="linear", ss_cap=0.5))
    (line,) = risky_settings(ss)
    assert line.startswith("sequence.label_smoothing = 0.1 with scheduled sampling up to "
                           "train.ss_cap = 0.5 (above 0.25)")
    at_cap = replace(ss, train=replace(ss.train, ss_cap=SS_CAP_WITH_SMOOTHING))
    no_ls = replace(ss, sequence=replace(ss.sequence, label_smoothing=0.0))
    assert risky_settings(at_cap) == risky_settings(no_ls) == []
