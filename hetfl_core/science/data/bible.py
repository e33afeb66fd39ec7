"""KJV/WEB verse pairs: an offline sentence-pair (paraphrase or not) task standing in for MRPC.

MRPC asks whether two news sentences say the same thing. Here the two sentences are a
verse of the King James Version (1611/1769) and a verse of the World English Bible (2000s
modern English): the **same** verse in the two translations is a paraphrase (label 1), a
**neighbouring** verse of the same chapter is not (label 0). Like MRPC's negatives, the
non-paraphrases share a topic, names and words with the first sentence.

The texts are Debian's ``sword-text-kjv`` and ``sword-text-web`` (SWORD zText modules),
installed under ``<data root>/bible/`` by ``tools/data/bible.sh`` and read by
:func:`read_ztext`; the verse numbering comes from :mod:`pysword`'s versification tables
(KJV for the KJV, NRSVA for the WEB with Deuterocanon), so the two are aligned by (book,
chapter, verse). Aligned verses whose Strong's numbers (both modules tag words with them)
overlap by less than :data:`MIN_LEMMA_JACCARD` are dropped as misaligned.

The Old Testament pre-trains the frozen backbone (:func:`pretraining_batches`); the New
Testament makes the federated task (:func:`load_bible_pairs`).
"""
from __future__ import annotations

import re
import struct
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import torch

from .storage import ArrayDataset, data_root, stored_arrays
from ..errors import DatasetUnavailable

__all__ = ["MODULES", "MAX_WORDS", "SEQ_LEN", "VOCAB_SIZE", "PAD", "UNK", "CLS", "SEP", "MIN_LEMMA_JACCARD",
           "NEGATIVE_DISTANCE", "Verse", "check_installed", "read_ztext", "clean_verse", "lemmas", "tokenize",
           "load_corpus", "Vocabulary", "vocabulary", "encode_pair", "Pair", "paraphrase_pairs", "load_bible_pairs",
           "pretraining_batches", "TOPICS", "TOPIC_WORDS", "topic_of_book", "encode_verse", "load_bible_topics"]

#: SWORD module names: (module, versification)
MODULES = {"kjv": ("engKJV2006eb", "kjv"), "web": ("engWEB2015eb", "nrsva")}
MAX_WORDS = 16                 # tokens kept of each sentence (CPU scale)
SEQ_LEN = 2 * MAX_WORDS + 3    # [CLS] a [SEP] b [SEP]
VOCAB_SIZE = 4000              # special tokens included
PAD, UNK, CLS, SEP = range(4)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
MIN_LEMMA_JACCARD = 0.3        # aligned verses sharing fewer Strong's numbers are dropped
NEGATIVE_DISTANCE = 3          # a non-paraphrase partner is 1..3 verses away in the same chapter
_HINT = "install it with 'bash tools/data/bible.sh DATA_ROOT' (Debian sword-text-kjv, sword-text-web)"


@dataclass(frozen=True)
class Verse:
    """One aligned verse: where it is and its text in both translations."""

    testament: str
    book: int          # 0..65 in canonical order (Genesis = 0, Matthew = 39)
    chapter: int
    verse: int
    kjv: str
    web: str
    overlap: float     # Jaccard overlap of the two translations' Strong's numbers


def _module_folder(root, translation: str) -> Path:
    return Path(root or data_root()) / "bible" / "modules" / "texts" / "ztext" / MODULES[translation][0]


def read_ztext(folder: Path, testament: str) -> list[str]:
    """Every entry of a zText module's testament (``"ot"``/``"nt"``) as raw markup, by index.

    ``*.bzs`` holds (offset, size, uncompressed size) of each zlib block in ``*.bzz``;
    ``*.bzv`` holds (block, offset, size) of each verse index, 10 bytes little-endian.
    """
    try:
        blocks_raw = (folder / f"{testament}.bzs").read_bytes()
        index_raw = (folder / f"{testament}.bzv").read_bytes()
        data = (folder / f"{testament}.bzz").read_bytes()
    except FileNotFoundError as exc:
        raise DatasetUnavailable(f"Bible module file {exc.filename} is missing; {_HINT}") from None
    @cache
    def inflated(block: int) -> bytes:
        start, length, _ = struct.unpack_from("<III", blocks_raw, 12 * block)
        return zlib.decompress(data[start:start + length])

    texts = []
    for i in range(0, len(index_raw) - 9, 10):
        block, offset, size = struct.unpack_from("<IIH", index_raw, i)
        texts.append(inflated(block)[offset:offset + size].decode("utf-8", errors="replace") if size else "")
    return texts


_NOTE = re.compile(r"<note\b.*?</note>|<title\b.*?</title>", re.S)
_TAG = re.compile(r"<[^>]+>")
_LEMMA = re.compile(r"strong:([GH])0*(\d+)")


def clean_verse(markup: str) -> str:
    """Plain text of an OSIS verse: notes and headings dropped, tags removed, spaces folded."""
    text = _TAG.sub("", _NOTE.sub(" ", markup)).replace("¶", " ")
    return re.sub(r"\s+", " ", text).strip()


def lemmas(markup: str) -> set[str]:
    """The Strong's numbers tagged in a verse (``{"G2316", ...}``)."""
    return {g + n for g, n in _LEMMA.findall(markup)}


_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?|\d+|[^\sa-z\d]")


def tokenize(text: str) -> list[str]:
    """Lower-cased words (with inner apostrophes) and single punctuation marks."""
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    return _TOKEN.findall(text)


@lru_cache(maxsize=4)
def _load_corpus(root: str) -> tuple[Verse, ...]:
    from pysword.books import BibleStructure

    kjv_struct, web_struct = (BibleStructure(MODULES[t][1]) for t in ("kjv", "web"))
    verses = []
    book_number = 0
    for testament in ("ot", "nt"):
        kjv_raw = read_ztext(_module_folder(root, "kjv"), testament)
        web_raw = read_ztext(_module_folder(root, "web"), testament)
        for book in kjv_struct.get_books()[testament]:
            web_chapters = web_struct.find_book(book.osis_name)[1].num_chapters
            for chapter, length in enumerate(book.chapter_lengths[:web_chapters], 1):
                k_idx = kjv_struct.ref_to_indicies(books=[book.osis_name], chapters=[chapter])[testament]
                w_idx = web_struct.ref_to_indicies(books=[book.osis_name], chapters=[chapter])[testament]
                for v in range(min(length, len(w_idx))):
                    if k_idx[v] >= len(kjv_raw) or w_idx[v] >= len(web_raw):
                        continue
                    a, b = kjv_raw[k_idx[v]], web_raw[w_idx[v]]
                    la, lb = lemmas(a), lemmas(b)
                    overlap = len(la & lb) / len(la | lb) if la | lb else 0.0
                    ta, tb = clean_verse(a), clean_verse(b)
                    if ta and tb:
                        verses.append(Verse(testament, book_number, chapter, v + 1, ta, tb, overlap))
            book_number += 1
    if not verses:
        raise DatasetUnavailable(f"no verse could be read from {Path(root) / 'bible'}; {_HINT}")
    return tuple(verses)


def load_corpus(root=None) -> tuple[Verse, ...]:
    """Every verse present in both translations, aligned, in canonical order (cached per process)."""
    folder = check_installed(root)
    return _load_corpus(str(folder))


def check_installed(root=None) -> Path:
    """The data root, or :class:`DatasetUnavailable` naming the installer if a module is missing."""
    folder = Path(root or data_root())
    for translation in MODULES:
        if not (_module_folder(folder, translation) / "nt.bzz").exists():
            raise DatasetUnavailable(f"the {translation.upper()} module is not in {folder / 'bible'}; {_HINT}")
    return folder


class Vocabulary:
    """Token <-> id. Ids 0..3 are ``[PAD] [UNK] [CLS] [SEP]``; unknown words map to ``[UNK]``."""

    def __init__(self, tokens: list[str]):
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, words: list[str]) -> list[int]:
        """Ids of ``words``."""
        return [self.ids.get(w, UNK) for w in words]

    def decode(self, ids) -> str:
        """Tokens of ``ids`` joined by spaces (padding dropped)."""
        return " ".join(self.tokens[int(i)] for i in ids if int(i) != PAD)


@lru_cache(maxsize=4)
def _vocabulary(root: str) -> Vocabulary:
    counts = Counter()
    for v in load_corpus(root):
        counts.update(tokenize(v.kjv))
        counts.update(tokenize(v.web))
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:VOCAB_SIZE - len(SPECIALS)]
    return Vocabulary(SPECIALS + ranked)


def vocabulary(root=None) -> Vocabulary:
    """The :data:`VOCAB_SIZE` most frequent tokens of both translations (ties by spelling)."""
    return _vocabulary(str(Path(root or data_root())))


def encode_pair(vocab: Vocabulary, first: str, second: str) -> np.ndarray:
    """``[CLS] first [SEP] second [SEP]`` as :data:`SEQ_LEN` ids, each side cut to :data:`MAX_WORDS`."""
    a = vocab.encode(tokenize(first)[:MAX_WORDS])
    b = vocab.encode(tokenize(second)[:MAX_WORDS])
    ids = [CLS] + a + [SEP] + b + [SEP]
    return np.array(ids + [PAD] * (SEQ_LEN - len(ids)), dtype=np.int64)


@dataclass(frozen=True)
class Pair:
    """A labelled sentence pair: the KJV of ``anchor`` with the WEB of ``partner``."""

    anchor: Verse
    partner: Verse
    kjv_first: bool
    label: int       # 1: the same verse (a paraphrase), 0: another verse

    @property
    def sentences(self) -> tuple[str, str]:
        """The two sentences in the order shown to the model."""
        kjv, web = self.anchor.kjv, self.partner.web
        return (kjv, web) if self.kjv_first else (web, kjv)


def paraphrase_pairs(verses, rng: np.random.Generator, negatives: str = "near",
                     positive_fraction: float = 0.5) -> list[Pair]:
    """One labelled pair per verse: the KJV with the WEB of the same verse (label 1) or, with
    probability ``1 - positive_fraction``, with the WEB of another verse (label 0).

    ``negatives="near"``: the other verse is 1..:data:`NEGATIVE_DISTANCE` verses away in the
    same chapter (same topic and names, like MRPC's negatives); ``"far"``: a verse of
    another chapter. The order of the two sentences is random. Only verses with a
    confident alignment (:data:`MIN_LEMMA_JACCARD`) are used.
    """
    if negatives not in ("near", "far"):
        raise ValueError(f"negatives must be near or far, got {negatives!r}")
    good = [v for v in verses if v.overlap >= MIN_LEMMA_JACCARD]
    by_chapter: dict[tuple[int, int], list[Verse]] = {}
    for v in good:
        by_chapter.setdefault((v.book, v.chapter), []).append(v)
    pairs = []
    for v in good:
        label = int(rng.random() < positive_fraction)
        partner = v
        if not label and negatives == "near":
            near = [u for u in by_chapter[(v.book, v.chapter)] if 0 < abs(u.verse - v.verse) <= NEGATIVE_DISTANCE]
            if not near:
                continue
            partner = near[int(rng.integers(len(near)))]
        elif not label:
            while (partner.book, partner.chapter) == (v.book, v.chapter):
                partner = good[int(rng.integers(len(good)))]
        pairs.append(Pair(v, partner, bool(rng.random() < 0.5), label))
    return pairs


TEST_FRACTION = 0.2
PAIRS_VERSION = 1   # raise when the pairs change, so stored copies are rebuilt


def _make_pairs(root: str):
    vocab = vocabulary(root)
    verses = [v for v in load_corpus(root) if v.testament == "nt"]
    pairs = paraphrase_pairs(verses, np.random.default_rng(0), negatives="near")
    return {"x": np.stack([encode_pair(vocab, *p.sentences) for p in pairs]),
            "y": np.array([p.label for p in pairs], dtype=np.int64),
            "books": np.array([p.anchor.book for p in pairs])}


def load_bible_pairs(root=None) -> ArrayDataset:
    """The New Testament paraphrase task: about 7.9k pairs, half paraphrases, fixed (seed 0).

    ``x`` is ``(N, SEQ_LEN)`` int64 token ids, ``y`` the label, split as
    :func:`load_bible_topics` (``groups``: the 27 books).
    """
    return _split_by_book("bible-pairs", root, f"pairs-{PAIRS_VERSION}.npz", _make_pairs, num_classes=2)


def _split_by_book(name: str, root, file: str, make, num_classes: int) -> ArrayDataset:
    """``make(root)``'s arrays (kept in ``<root>/bible/<file>``: parsing takes seconds), split."""
    root = str(Path(root or data_root()))
    check_installed(root)
    stored = stored_arrays(Path(root) / "bible" / file, ("x", "y", "books"), lambda: make(root))
    x, y, books = stored["x"], stored["y"], stored["books"]
    test = np.zeros(len(y), bool)
    test[np.random.default_rng(1).permutation(len(y))[:int(round(TEST_FRACTION * len(y)))]] = True
    train_books = books[~test]
    order = {b: i for i, b in enumerate(sorted(set(books), key=lambda b: (-(train_books == b).sum(), b)))}
    groups = np.array([order[b] for b in books])
    t = torch.from_numpy
    return ArrayDataset(name, t(x[~test]), t(y[~test]), t(x[test]), t(y[test]), num_classes=num_classes,
                        groups=t(groups[~test]))


def pretraining_batches(root=None, batch_size: int = 32, seed: int = 0):
    """Endless pre-training batches ``(ids, labels)`` from the Old Testament: the paraphrase
    task with **far** negatives (a verse of another chapter).

    This is the backbone's "disjoint pair task" (the book's stand-in): other books (the Old Testament;
    the federated task uses the New) and easier negatives than the federated task's
    neighbouring verses.
    """
    rng = np.random.default_rng(seed)
    vocab = vocabulary(root)
    pairs = paraphrase_pairs([v for v in load_corpus(root) if v.testament == "ot"], rng, negatives="far")
    x = torch.from_numpy(np.stack([encode_pair(vocab, *p.sentences) for p in pairs]))
    y = torch.tensor([p.label for p in pairs])
    while True:
        rows = torch.from_numpy(rng.integers(len(y), size=batch_size))
        yield x[rows], y[rows]


# -- the verse-topic task (an AG News stand-in) ---------------------------------------------
#: the four parts of the (Protestant, KJV-order) canon and their first book numbers
TOPICS = ("law & history", "wisdom & poetry", "prophets", "New Testament")
_TOPIC_STARTS = (0, 17, 22, 39)   # Genesis, Job, Isaiah, Matthew
TOPIC_WORDS = 32                  # tokens kept of a verse (the median KJV verse has 24 words)
TOPICS_VERSION = 1


def topic_of_book(book: int) -> int:
    """The part of the canon a book (0..65) belongs to: Genesis-Esther 0, Job-Song of
    Songs 1, Isaiah-Malachi 2, Matthew-Revelation 3."""
    return int(np.searchsorted(_TOPIC_STARTS, book, side="right") - 1)


def encode_verse(vocab: Vocabulary, text: str) -> np.ndarray:
    """A verse as :data:`TOPIC_WORDS` token ids, cut or padded with ``[PAD]``."""
    ids = vocab.encode(tokenize(text)[:TOPIC_WORDS])
    return np.array(ids + [PAD] * (TOPIC_WORDS - len(ids)), dtype=np.int64)


def _make_topics(root: str):
    vocab = vocabulary(root)
    verses = load_corpus(root)
    return {"x": np.stack([encode_verse(vocab, v.kjv) for v in verses]),
            "y": np.array([topic_of_book(v.book) for v in verses], dtype=np.int64),
            "books": np.array([v.book for v in verses])}


def load_bible_topics(root=None) -> ArrayDataset:
    """Every KJV verse labelled by its part of the canon (:data:`TOPICS`, 4 classes like
    AG News): about 31k verses, a fixed random 80/20 train/test split (seed 1).

    ``x`` is ``(N, TOPIC_WORDS)`` int64 token ids (the vocabulary of :func:`vocabulary`),
    ``groups`` numbers the 66 books by decreasing training size, so
    ``partition="natural"`` makes one client per book: natural non-IID, and extreme,
    since every book lies in one part, every client holds one class.
    """
    return _split_by_book("bible-topics", root, f"topics-{TOPICS_VERSION}.npz", _make_topics,
                          num_classes=len(TOPICS))
