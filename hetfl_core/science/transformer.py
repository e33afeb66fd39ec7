"""A tiny BERT-style encoder, its pre-training, and LoRA fine-tuning with a frozen backbone.

Tan et al. (2025) fine-tune BERT-Base with LoRA adapters on MRPC; the CPU stand-in is
a 2-layer encoder (d = 32, 2 heads, feed-forward 128) pre-trained here, never downloaded:

* :class:`TinyEncoder` is the trainable encoder with a sentence-pair classifier on a
  tanh pooler over ``[CLS]`` (where BERT has its next-sentence head), trained by
  :func:`pretrain` on :func:`hetfl_core.science.data.bible.pretraining_batches` (a "disjoint pair
  task") and cached on disk by :func:`pretrained_backbone`.
* :class:`LoRATransformer` holds that backbone as **buffers** (frozen: never averaged,
  sparsified or pruned) and trains LoRA adapters (Hu et al., 2022) on the query and value
  projections of every layer, :math:`W x + \\frac{\\alpha}{r} B A x` with :math:`A` random
  and :math:`B` zero at the start, and a linear classifier on the pooled ``[CLS]``. Its
  parameters, in forward order, are layer 0's adapters (``adapters.0.q.a``, ``.q.b``,
  ``.v.a``, ``.v.b``), layer 1's, then ``classifier``: the paper's split (base = the
  earlier layers' LoRA, private = the last layers' LoRA and the classifier) is
  ``split="first:4"`` of :mod:`hetfl_core.science.methods.sparse_prune_pfl`.

Both share one functional forward, :func:`encoder_forward`.
"""
from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import math
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .data import bible, data_root
from .errors import ConfigError
from .threads import single_thread

__all__ = ["ENCODER", "PRETRAIN", "TinyEncoder", "LoRA", "LoRATransformer", "encoder_forward", "pretrain",
           "pretrained_backbone"]

#: the encoder's shape (a CPU-sized encoder: d = 32, 2 heads, 2 layers)
ENCODER = {"dim": 32, "heads": 2, "layers": 2, "ffn": 128}
#: the pre-training run: Adam steps, batch, peak learning rate (linear warm-up then decay), seed
PRETRAIN = {"steps": 5000, "batch": 32, "lr": 5e-3, "warmup": 100, "seed": 0}
#: below this training accuracy at its last step the pre-training is reported as failed (a warning)
MIN_PRETRAIN_ACC = 0.75


def _weight_shapes(vocab: int, seq_len: int, dim: int, heads: int, layers: int, ffn: int) -> dict:
    shapes = {"tok": (vocab, dim), "pos": (seq_len, dim), "seg": (2, dim), "ln_e_w": (dim,), "ln_e_b": (dim,)}
    for i in range(layers):
        for part in ("q", "k", "v", "o"):
            shapes[f"l{i}_{part}_w"], shapes[f"l{i}_{part}_b"] = (dim, dim), (dim,)
        shapes.update({f"l{i}_ln1_w": (dim,), f"l{i}_ln1_b": (dim,), f"l{i}_ln2_w": (dim,), f"l{i}_ln2_b": (dim,),
                       f"l{i}_ff1_w": (ffn, dim), f"l{i}_ff1_b": (ffn,), f"l{i}_ff2_w": (dim, ffn),
                       f"l{i}_ff2_b": (dim,)})
    shapes.update({"ln_f_w": (dim,), "ln_f_b": (dim,), "pool_w": (dim, dim), "pool_b": (dim,)})
    return shapes


def segments_of(ids: torch.Tensor, sep: int = 3) -> torch.Tensor:
    """Segment ids: 0 up to and including the first ``[SEP]``, 1 after it."""
    is_sep = (ids == sep).long()
    return ((is_sep.cumsum(1) - is_sep) > 0).long()


def encoder_forward(w: dict, ids: torch.Tensor, heads: int, adapters=None, pad: int = 0) -> torch.Tensor:
    """Hidden states ``(batch, seq, dim)`` of a pre-LN transformer encoder with weights ``w``.

    ``adapters[i]["q"]`` / ``["v"]`` (callables ``x -> delta``) add LoRA updates to layer
    ``i``'s query and value projections. Padding keys are masked out of attention.
    """
    batch, seq = ids.shape
    x = w["tok"][ids] + w["pos"][:seq] + w["seg"][segments_of(ids)]
    x = F.layer_norm(x, x.shape[-1:], w["ln_e_w"], w["ln_e_b"])
    dim = x.shape[-1]
    keep = (ids != pad)[:, None, None, :]
    layers = sum(1 for k in w if k.endswith("_q_w"))
    for i in range(layers):
        h = F.layer_norm(x, (dim,), w[f"l{i}_ln1_w"], w[f"l{i}_ln1_b"])
        q = F.linear(h, w[f"l{i}_q_w"], w[f"l{i}_q_b"])
        k = F.linear(h, w[f"l{i}_k_w"], w[f"l{i}_k_b"])
        v = F.linear(h, w[f"l{i}_v_w"], w[f"l{i}_v_b"])
        if adapters is not None:
            q = q + adapters[i]["q"](h)
            v = v + adapters[i]["v"](h)
        split = lambda t: t.view(batch, seq, heads, dim // heads).transpose(1, 2)  # noqa: E731
        scores = split(q) @ split(k).transpose(-1, -2) / math.sqrt(dim // heads)
        att = scores.masked_fill(~keep, float("-inf")).softmax(-1) @ split(v)
        x = x + F.linear(att.transpose(1, 2).reshape(batch, seq, dim), w[f"l{i}_o_w"], w[f"l{i}_o_b"])
        h = F.layer_norm(x, (dim,), w[f"l{i}_ln2_w"], w[f"l{i}_ln2_b"])
        x = x + F.linear(F.gelu(F.linear(h, w[f"l{i}_ff1_w"], w[f"l{i}_ff1_b"])), w[f"l{i}_ff2_w"], w[f"l{i}_ff2_b"])
    return F.layer_norm(x, (dim,), w["ln_f_w"], w["ln_f_b"])


def pooled(w: dict, hidden: torch.Tensor) -> torch.Tensor:
    """BERT's pooler: ``tanh(W_p h_[CLS] + b_p)``."""
    return torch.tanh(F.linear(hidden[:, 0], w["pool_w"], w["pool_b"]))


class TinyEncoder(nn.Module):
    """The trainable encoder with a sentence-pair head on the pooled ``[CLS]`` (pre-training only).

    Embeddings start at BERT's N(0, 0.02²), weight matrices at N(0, 1/fan-in). BERT's 0.02
    for the matrices suits d = 768 (1/√768 ≈ 0.036); at d = 32 it leaves the query-key
    product near zero, attention uniform and the pair loss at chance for thousands of
    steps, for a number of steps that depends on the seed and on floating-point rounding
    (seed 0 was still at 59% after 5000 steps on one CPU, seed 1 left chance near step
    1500). At 1/fan-in every seed tried (0-5) leaves chance within about 2000 steps.
    """

    def __init__(self, vocab: int, seq_len: int, dim=32, heads=2, layers=2, ffn=128):
        super().__init__()
        if dim % heads:
            raise ConfigError(f"dim {dim} must be a multiple of heads {heads}")
        self.heads = heads
        self.weights = nn.ParameterDict()
        for name, shape in _weight_shapes(vocab, seq_len, dim, heads, layers, ffn).items():
            if name.endswith("_b"):
                value = torch.zeros(shape)
            elif name.startswith("ln") or "_ln" in name:
                value = torch.ones(shape)
            elif name in ("tok", "pos", "seg"):
                value = torch.randn(shape) * 0.02                   # embeddings: BERT's scale
            else:
                value = torch.randn(shape) / math.sqrt(shape[1])   # matrices: variance 1 / fan-in
            self.weights[name] = nn.Parameter(value)
        self.pair = nn.Linear(dim, 2)

    def forward(self, ids):
        """Sentence-pair logits."""
        w = dict(self.weights)
        return self.pair(pooled(w, encoder_forward(w, ids, self.heads)))


def pretrain(batches, vocab: int, seq_len: int, steps: int, lr: float, warmup: int, seed: int = 0,
             progress: bool = True, **shape) -> tuple[dict, list[dict]]:
    """AdamW on the sentence-pair loss for ``steps`` batches ``(ids, labels)`` from ``batches``,
    the learning rate warmed up linearly over ``warmup`` steps and then decayed linearly to 0.

    Returns the encoder weights (a dict of tensors) and a log of the mean loss and
    accuracy over each 100 steps.
    """
    torch.manual_seed(seed)
    model = TinyEncoder(vocab, seq_len, **shape)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, 1 - s / steps))
    log, window = [], []
    bar = range(steps)
    if progress:
        from tqdm import tqdm

        bar = tqdm(bar, desc="pre-training the encoder", unit="step", leave=False)
    for step in bar:
        ids, labels = next(batches)
        logits = model(ids)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        window.append((loss.item(), (logits.argmax(1) == labels).float().mean().item()))
        if (step + 1) % 100 == 0:
            log.append({"step": step + 1, "loss": sum(w[0] for w in window) / len(window),
                        "acc": sum(w[1] for w in window) / len(window)})
            window = []
    return {k: v.detach().clone() for k, v in model.weights.items()}, log


def _backbone_key() -> str:
    settings = {"encoder": ENCODER, "pretrain": PRETRAIN, "vocab": bible.VOCAB_SIZE, "max_words": bible.MAX_WORDS,
                "source": [inspect.getsource(f) for f in (_weight_shapes, segments_of, encoder_forward, pooled,
                                                          TinyEncoder, pretrain, bible.tokenize, bible.clean_verse,
                                                          bible.pretraining_batches, bible.paraphrase_pairs, bible.encode_pair,
                                                          bible._load_corpus,
                                                          bible._vocabulary)],
                "torch": torch.__version__}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def pretrained_backbone(root=None, progress: bool = True) -> dict:
    """The Bible-pre-trained encoder: loaded from ``<data root>/bible/backbone-<key>.pt``, or
    trained once (about two minutes on one CPU thread) and saved there.

    The key hashes :data:`ENCODER`, :data:`PRETRAIN`, the vocabulary settings and the code,
    so a change to any of them trains a new backbone. A file lock lets parallel processes
    wait for one training instead of repeating it. The returned dict has the weights and
    the training ``log``.
    """
    root = Path(root or data_root())
    path = root / "bible" / f"backbone-{_backbone_key()}.pt"
    if not path.exists():
        bible.check_installed(root)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                with single_thread():
                    batches = bible.pretraining_batches(root, batch_size=PRETRAIN["batch"], seed=PRETRAIN["seed"])
                    weights, log = pretrain(batches, len(bible.vocabulary(root)), bible.SEQ_LEN,
                                            PRETRAIN["steps"], PRETRAIN["lr"], PRETRAIN["warmup"],
                                            seed=PRETRAIN["seed"], progress=progress, **ENCODER)
                if log[-1]["acc"] < MIN_PRETRAIN_ACC:
                    warnings.warn(f"the encoder's pre-training ended at {100 * log[-1]['acc']:.0f}% pair accuracy "
                                  f"(below {100 * MIN_PRETRAIN_ACC:.0f}%): the frozen backbone carries little, so "
                                  "the LoRA runs on bible-pairs will stay near chance", stacklevel=2)
                tmp = path.with_suffix(".tmp")
                torch.save({"weights": weights, "log": log, "encoder": ENCODER, "pretrain": PRETRAIN}, tmp)
                tmp.replace(path)
    return torch.load(path, weights_only=True)


class LoRA(nn.Module):
    """A low-rank update ``x -> (alpha / rank) B(A(x))``; ``B`` starts at zero, so the update does."""

    def __init__(self, dim: int, rank: int, alpha: float):
        super().__init__()
        self.a = nn.Linear(dim, rank, bias=False)
        self.b = nn.Linear(rank, dim, bias=False)
        nn.init.zeros_(self.b.weight)
        self.scale = alpha / rank

    def forward(self, x):
        return self.b(self.a(x)) * self.scale


class LoRATransformer(nn.Module):
    """Frozen pre-trained encoder (buffers) + trainable LoRA on Q and V + a linear classifier.

    ``backbone`` is a dict of encoder weights with ``heads`` attention heads; by default
    the Bible-pre-trained one (:func:`pretrained_backbone`), whose token ids are
    :mod:`hetfl_core.science.data.bible`'s. ``width`` scales the LoRA rank (at least 1).
    """

    def __init__(self, in_shape, num_classes=2, width=1.0, rank=4, alpha=8.0, backbone: dict | None = None,
                 heads: int = ENCODER["heads"]):
        super().__init__()
        if len(in_shape) != 1:
            raise ConfigError(f"lora-transformer needs token-id inputs (batch, seq), got inputs of shape {in_shape}: "
                              "use --dataset bible-pairs")
        if backbone is None:
            if in_shape[0] != bible.SEQ_LEN:
                raise ConfigError(f"lora-transformer's pre-trained encoder reads {bible.SEQ_LEN} tokens, "
                                  f"got {in_shape[0]}: use --dataset bible-pairs")
            stored = pretrained_backbone()
            backbone, self.heads = stored["weights"], stored["encoder"]["heads"]
        else:
            self.heads = heads
        self._names = list(backbone)
        for name, value in backbone.items():
            self.register_buffer(f"frozen_{name}", value.detach().clone())
        dim = backbone["tok"].shape[1]
        r = max(1, int(math.ceil(rank * width)))
        self.adapters = nn.ModuleList(nn.ModuleDict({"q": LoRA(dim, r, alpha), "v": LoRA(dim, r, alpha)})
                                      for k in backbone if k.endswith("_q_w"))
        self.classifier = nn.Linear(dim, num_classes)

    def backbone(self) -> dict:
        """The frozen encoder weights."""
        return {n: getattr(self, f"frozen_{n}") for n in self._names}

    def forward(self, ids):
        w = self.backbone()
        return self.classifier(pooled(w, encoder_forward(w, ids, self.heads, self.adapters)))
