"""Retrieval of similar translation pairs from a translation memory, for retrieval-augmented MT and ST.

A translation memory is the training pairs themselves (the corpus and any extra text). For each source, the
k pairs whose sources are nearest by BM25 over lower-cased words (Okapi BM25 with Lucene's idf,
log(1 + (N - df + 0.5) / (df + 0.5)), and the term weight tf / (tf + k1 (1 - b + b |d| / avgdl)), as
`bm25s`'s "lucene" method) become in-context examples in front of it, the form of neural fuzzy repair
(Bulte & Tezcan, ACL 2019) and of example selection for LLM translation (Agrawal et al., Findings ACL 2023):

    English: <example source>\\nGerman: <example target>\\nEnglish: <source>\\nGerman: <target>

`speechmt data retrieve` writes each split's examples beside it (DIR/examples/SPLIT.jsonl; a stream's split
"mt-text/train" -> DIR/mt-text/examples/train.jsonl), one line per utterance, best first, with its score; a
model with `decoder.examples: k` reads the first k of them in training and in `evaluate --task mt`; a speech
model (whisper_asr) reads them before its speech, found when decoding by its own transcript in the memory of the
manifests given to `--memory` (memory_from_manifests; speechmt.decoding.translate.encode_with_examples).

Scores are one sparse-dense product per chunk of queries (documents x vocabulary in CSR times a query count
matrix): 71k queries against 71k pairs take about a minute and a half on one core. A pair never serves as its
own example (leave-one-out when the queries are part of the memory), nor does any pair with the same source
words (case and punctuation aside); a pair with score 0 (no word shared) is never returned.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import warnings
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import torch

from speechmt.atomic import write_text_atomic
from speechmt.data.manifest import ManifestError, Record, read_manifest, read_split
from speechmt.hub import speechmt_home

_WORD = re.compile(r"\w+")
_TIE_MARGIN = 8  # candidates beyond k, so that pairs tied with the k-th are ordered by position


def words(text: str) -> list[str]:
    """The lower-cased word tokens BM25 reads (Unicode letters, digits and underscores)."""
    return _WORD.findall(text.lower())


class BM25:
    """BM25 scores of queries against a fixed list of documents (each a list of words)."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75):
        if not docs:
            raise ValueError("BM25 needs at least one document")
        self.vocab: dict[str, int] = {}
        rows, cols, tfs = [], [], []
        for d, doc in enumerate(docs):
            for word, tf in Counter(doc).items():
                rows.append(d)
                cols.append(self.vocab.setdefault(word, len(self.vocab)))
                tfs.append(tf)
        n, v = len(docs), max(len(self.vocab), 1)
        rows_t, cols_t, tf_t = (
            torch.tensor(rows, dtype=torch.long),
            torch.tensor(cols, dtype=torch.long),
            torch.tensor(tfs, dtype=torch.float64),
        )
        lengths = torch.tensor([len(doc) for doc in docs], dtype=torch.float64)
        df = torch.bincount(cols_t, minlength=v).double()
        idf = torch.log1p((n - df + 0.5) / (df + 0.5))
        norm = k1 * (1 - b + b * lengths / lengths.mean().clamp(min=1e-9))
        weight = idf[cols_t] * tf_t / (tf_t + norm[rows_t])
        crow = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(rows_t, minlength=n).cumsum(0)])
        with warnings.catch_warnings():  # "sparse CSR support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            self.matrix = torch.sparse_csr_tensor(crow, cols_t, weight.float(), (n, v))  # (N, V); rows in order

    def __len__(self) -> int:
        return self.matrix.size(0)

    def scores(self, queries: Sequence[Sequence[str]]) -> torch.Tensor:
        """queries (Q lists of words; a word twice in a query counts twice, as in Lucene and bm25s) -> scores
        (Q, N)."""
        q = torch.zeros(self.matrix.size(1), len(queries))
        for j, query in enumerate(queries):
            for word, count in Counter(query).items():
                if word in self.vocab:
                    q[self.vocab[word], j] = float(count)
        return (self.matrix @ q).T.contiguous()


@dataclass(frozen=True)
class Example:
    """One retrieved pair: its position in the memory, its texts and its BM25 score."""

    index: int
    src: str
    tgt: str
    score: float


class TranslationMemory:
    """Translation pairs searchable by their sources (BM25 over words)."""

    def __init__(self, pairs: Sequence[tuple[str, str]], k1: float = 1.5, b: float = 0.75):
        self.pairs = [(s.strip(), t.strip()) for s, t in pairs]
        self.index = BM25([words(s) for s, _ in self.pairs], k1, b)
        self._same: dict[str, list[int]] = {}
        for i, (s, _) in enumerate(self.pairs):
            self._same.setdefault(_key(s), []).append(i)

    def __len__(self) -> int:
        return len(self.pairs)

    def search(
        self, queries: Sequence[str], k: int, own: Sequence[int | None] | None = None, chunk: int = 256
    ) -> list[list[Example]]:
        """The up to `k` best examples of each query, best first; `own[j]`: query j's own position in the
        memory (never returned), or None. Pairs with the query's source text and pairs sharing no word with it
        are never returned."""
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        own = own if own is not None else [None] * len(queries)
        if len(own) != len(queries):
            raise ValueError(f"{len(own)} own positions for {len(queries)} queries")
        found: list[list[Example]] = []
        for start in range(0, len(queries), chunk):
            batch = queries[start : start + chunk]
            scores = self.index.scores([words(q) for q in batch])
            for j, q in enumerate(batch):
                banned = list(self._same.get(_key(q), ()))
                if own[start + j] is not None:
                    banned.append(int(own[start + j]))
                scores[j, banned] = 0.0
            top = scores.topk(min(k + _TIE_MARGIN, len(self)), dim=1)
            for values, indices in zip(top.values.tolist(), top.indices.tolist()):
                best = sorted((-v, i) for v, i in zip(values, indices) if v > 0)[:k]  # ties: the earlier pair
                found.append([Example(i, *self.pairs[i], -v) for v, i in best])
        return found


def _key(text: str) -> str:
    """Sources with the same words in the same order (case and punctuation aside) are the same source."""
    return " ".join(words(text))


def _split_location(data_dir: str | os.PathLike, split: str) -> tuple[Path, str]:
    """A split's folder and name: "train" -> (data_dir, "train"), a stream's "mt-text/train" -> (data_dir/mt-text,
    "train")."""
    folder, _, name = split.rpartition("/")
    return Path(data_dir) / folder, name


def examples_path(data_dir: str | os.PathLike, split: str) -> Path:
    """Where the retrieved examples of a split ("train", or a stream's "mt-text/train") are written."""
    folder, name = _split_location(data_dir, split)
    return folder / "examples" / f"{name}.jsonl"


def _split_records(data_dir: str | os.PathLike, split: str) -> list[Record]:
    return read_split(*_split_location(data_dir, split))


@dataclass(frozen=True)
class Distractors:
    """Examples beside the point, for training a model that must learn to ignore misleading ones: each utterance
    is drawn (with probability `rate`, by `seed` and its id, so the same utterance is drawn in every run) to get
    its examples from the `memory` manifests (memory_from_manifests: another domain's pairs, which share words
    with the source and differ in sense and register) instead of the split's own memory, the best after the first
    `skip` (the memory may then be the split's own: pairs that share fewer of its words, in its own register)."""

    memory: tuple[str, ...]
    rate: float
    seed: int = 0
    skip: int = 0

    def __post_init__(self):
        if not self.memory:
            raise ValueError("distractors need a memory (manifests, memory folders or names)")
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"the distractor rate must be in (0, 1]; got {self.rate}")
        if self.skip < 0:
            raise ValueError(f"the distractors' skip must be >= 0; got {self.skip}")

    def drawn(self, split: str, utt_id: str) -> bool:
        """Whether `utt_id` of `split` reads distractors (stable across runs and machines)."""
        return random.Random(f"{self.seed}:{split}:{utt_id}").random() < self.rate


def _search_split(
    tm: TranslationMemory,
    records: Sequence[Record],
    k: int,
    own: Sequence[int | None],
    split: str,
    distract: Distractors | None,
    other: TranslationMemory | None,
) -> tuple[list[list[Example]], list[bool]]:
    """The examples of each of `records` and whether it was drawn: the drawn ones from `other` (its best after
    distract.skip), the others from `tm` (with `own` left out); each utterance is searched once."""
    drawn = [distract is not None and distract.drawn(split, r.id) for r in records]
    found: list[list[Example]] = [[] for _ in records]
    plain = [j for j, d in enumerate(drawn) if not d]
    for j, ex in zip(plain, tm.search([records[j].src_text for j in plain], k, [own[j] for j in plain])):
        found[j] = ex
    picked = [j for j, d in enumerate(drawn) if d]
    if picked:
        for j, ex in zip(picked, other.search([records[j].src_text for j in picked], k + distract.skip)):
            found[j] = ex[distract.skip :]
    return found, drawn


def retrieve_splits(
    data_dir: str | os.PathLike,
    splits: Sequence[str],
    memory: Sequence[str],
    k: int,
    distract: Distractors | None = None,
) -> dict:
    """Writes the `k` best examples of every utterance of `splits` from the pairs of the `memory` splits (all
    under `data_dir`; "mt-text/train" names a stream's split) to examples_path; a split that is part of the
    memory never gets an utterance's own pair. With `distract`, the utterances it draws get theirs from its
    memory instead (their lines marked "distract": true). Returns the summary: the memory, and per split its
    utterances, how many got fewer than k examples (none shares a word), how many were drawn, and the mean
    score; each split's part is also written beside its examples (examples/SPLIT.summary.json), so a later run
    for other splits keeps it."""
    start = time.perf_counter()
    tm, offsets = memory_of(data_dir, memory)
    other = memory_from_manifests(distract.memory) if distract else None
    ends = [*list(offsets.values())[1:], len(tm)]
    sizes = {name: end - first for (name, first), end in zip(offsets.items(), ends)}
    summary = {
        "memory": sizes,
        "memory_pairs": len(tm),
        "k": k,
        "method": "bm25 (lucene idf, k1 1.5, b 0.75) over lower-cased words",
        "splits": {},
    }
    if distract:
        summary["distract"] = {
            "memory": list(distract.memory),
            "memory_pairs": len(other),
            "rate": distract.rate,
            "seed": distract.seed,
            "skip": distract.skip,
        }
    queries = {name: _split_records(data_dir, name) for name in dict.fromkeys(splits)}  # all found before writing
    for name, records in queries.items():
        base = offsets.get(name)
        own = [None if base is None else base + i for i in range(len(records))]
        found, drawn = _search_split(tm, records, k, own, name, distract, other)
        _write_jsonl(
            examples_path(data_dir, name),
            (
                {
                    "id": r.id,
                    "examples": [[e.src, e.tgt, round(e.score, 4)] for e in ex],
                    **({"distract": True} if d else {}),
                }
                for r, ex, d in zip(records, found, drawn)
            ),
        )
        scores = [e.score for ex in found for e in ex]
        summary["splits"][name] = {
            "utterances": len(records),
            "fewer_than_k": sum(len(ex) < k for ex in found),
            "leave_one_out": base is not None,
            "mean_score": round(sum(scores) / max(len(scores), 1), 3),
        }
        if distract:
            summary["splits"][name]["distracted"] = sum(drawn)
        own_summary = {
            **{key: summary[key] for key in ("memory", "memory_pairs", "k", "method", "distract") if key in summary},
            "split": name,
            **summary["splits"][name],
        }
        _write_jsonl(examples_path(data_dir, name).with_suffix(".summary.json"), [own_summary], indent=1)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return summary


def memory_of(data_dir: str | os.PathLike, splits: Sequence[str]) -> tuple[TranslationMemory, dict[str, int]]:
    """The translation memory of the pairs of `splits` (under `data_dir`; "mt-text/train" names a stream's split),
    in that order, and each split's first position in it."""
    pairs, offsets = [], {}
    for name in dict.fromkeys(splits):
        offsets[name] = len(pairs)
        pairs += [(r.src_text, r.tgt_text) for r in _split_records(data_dir, name)]
    return TranslationMemory(pairs), offsets


MEMORY_FILE = "memory.jsonl"  # a translation memory folder's manifest (`speechmt data synth-memory` writes one)


def memory_manifest(name: str | os.PathLike) -> Path:
    """Where a translation memory's pairs are: a manifest (.jsonl) as it is; a folder, or a name of a folder under
    $SPEECHMT_HOME (`ding-en-de`, which `speechmt data synth-memory` builds), as its memory.jsonl. ManifestError (one
    line) when none is there."""
    path = Path(name)
    if path.is_file():
        return path
    for folder in (path, speechmt_home() / path):
        if (folder / MEMORY_FILE).is_file():
            return folder / MEMORY_FILE
    if path.suffix == ".jsonl" or len(path.parts) > 1:
        raise ManifestError(f"{name}: no such manifest for the translation memory")
    raise ManifestError(
        f"{name}: no translation memory of that name ({speechmt_home() / path / MEMORY_FILE} not "
        f"found); build it with `speechmt data synth-memory --out {speechmt_home() / path}`"
    )


def memory_from_manifests(paths: Sequence[str | os.PathLike]) -> TranslationMemory:
    """The translation memory of every (src_text, tgt_text) pair of `paths` (manifests, memory folders or names:
    memory_manifest), in order; ManifestError (one line) for a missing one."""
    manifests = [memory_manifest(p) for p in paths]
    return TranslationMemory([(r.src_text, r.tgt_text) for path in manifests for r in read_manifest(path)])


def _write_jsonl(path: Path, rows, indent: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False, indent=indent) + "\n" for row in rows))


def read_examples(data_dir: str | os.PathLike, split: str, records: Sequence[Record]) -> list[list[tuple[str, str]]]:
    """The retrieved examples of each of `records` (best first), from examples_path(data_dir, split);
    ManifestError (one line) when the file is missing or lacks one of the records."""
    path = examples_path(data_dir, split)
    if not path.is_file():
        raise ManifestError(
            f"{path}: no retrieved examples for split {split!r} (the model reads decoder.examples); "
            f"run `speechmt data retrieve --data {data_dir} --splits {split}`"
        )
    found = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                found[row["id"]] = [(str(s), str(t)) for s, t, *_ in row["examples"]]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ManifestError(f"{path}:{lineno}: malformed examples line ({e})") from None
    missing = [r.id for r in records if r.id not in found]
    if missing:
        raise ManifestError(
            f"{path}: no examples for {len(missing)} utterances of split {split!r} "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); rerun `speechmt data retrieve`"
        )
    return [found[r.id] for r in records]


def example_prefixes(
    examples: Sequence[Sequence[tuple[str, str]]], k: int, tokenizer, src_lang: str, tgt_lang: str
) -> list[torch.Tensor]:
    """Per utterance, the source ids (LongTensor (P,)) of its first `k` examples in the LM's few-shot form, read
    before the speech path's vectors: " ex src\nGerman: ex tgt\nEnglish:" (empty for no examples); `tokenizer`:
    the LM's source-side tokenizer (speechmt.tokenizers.lm.LMTokenizer)."""
    from speechmt.tokenizers.lm import few_shot_source

    return [
        torch.tensor(
            tokenizer.encode(few_shot_source("", ex[:k], src_lang, tgt_lang)) if ex[:k] else [], dtype=torch.long
        )
        for ex in examples
    ]


def with_examples(records: Sequence[Record], data_dir: str | os.PathLike, split: str, k: int) -> list[Record]:
    """`records` with each source text preceded by its first `k` retrieved examples in the LM's few-shot form
    (speechmt.tokenizers.lm.few_shot_source)."""
    from speechmt.tokenizers.lm import few_shot_source

    examples = read_examples(data_dir, split, records)
    return [
        replace(r, src_text=few_shot_source(r.src_text, ex[:k], r.src_lang, r.tgt_lang))
        for r, ex in zip(records, examples)
    ]
