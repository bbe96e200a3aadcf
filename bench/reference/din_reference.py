#!/usr/bin/python3
"""Eager-PyTorch reference trainer of MultiTowerDIN for bench/din_throughput.sh.

What it is for
--------------
bench/din_throughput.sh compares tzrec-cpp's training throughput and one-epoch
eval AUC on `multi_tower_din` against this plain PyTorch eager-mode model. It
mirrors, layer by layer, bench/configs/multi_tower_din_taobao_bench.config
(TorchEasyRec's MultiTowerDIN on Taobao-shaped features):

* DEEP group "deep": 16 features (14 id features, `price` as a bucketized raw
  feature, `pid`), embedding dim 16, sum pooling (multi-value cells sum, empty
  cells give zeros) -> [B, 256] -> tower MLP [512, 256, 128] (Linear + ReLU).
* SEQUENCE group "seq": query adgroup_id, cate_id, brand (one id each) and the
  sequence click_50_seq__{adgroup_id, cate_id, brand} (one id per step, at most
  `sequence_length` 50 steps). As in TorchEasyRec, the sequence group looks up
  its own tables (an EmbeddingCollection beside the DEEP group's
  EmbeddingBagCollection): the query features get tables separate from the
  deep group's, and each sequence sub-feature its own. Padded steps are zeros.
* DIN attention: per step, MLP [256, 64] (Linear + ReLU) over
  cat[q, s, q - s, q * s] (the query zero-padded to the sequence width), then
  Linear(1); padded steps get -2^31 + 1; softmax over the steps; the weights
  sum the sequence -> [B, 48].
* final MLP [64] over cat[tower(128), din(48)], Linear(1), BCEWithLogits (mean).
* Optimizers: Adagrad (lr 0.05, eps 1e-8, accumulator 0) for the embedding
  tables, Adam (lr 0.001) for everything else. Init: tables uniform
  +-sqrt(1 / rows) (TorchRec's default), Linear layers PyTorch's default.

If you change the bench config, change the constants below too (main() checks
them against the config file given with --config).

It uses only the standard library, numpy and torch (Debian's /usr/bin/python3
with python3-torch 1.13). The data is the FG_NONE CSV that `tzrec gen_data`
writes: a header line, ids as integers, multi-value cells joined by \\x03,
sequence steps joined by "|". It is parsed and cut into per-batch tensors
before any timing.

Speed settings (the reference gets its best honest setting; the math is the
same in every layout):
* --layout fused (default): all 22 tables are row ranges of one table, looked
  up by a single nn.EmbeddingBag(mode="sum") call per step: the deep features'
  bags (one per row and feature) and the sequence group's bags (one per row,
  step and feature; a padded step is an empty bag, which sums to zero). The
  bags are ordered so that the deep input [B, 256], the query [B, 48] and the
  sequence [B, T, 48] are views of the lookup output (no copies), and there is
  one sparse gradient and one Adagrad update per step.
  --layout per_table: one nn.EmbeddingBag per deep feature, one nn.Embedding
  per query and sequence table (padding row excluded from gradients).
* --grad sparse (default; sparse=True and torch.optim.Adagrad on the sparse
  gradient, which only touches looked-up rows) or dense (sparse=False: the
  whole table's gradient and Adagrad state are updated every step; the same
  result, since untouched rows get a zero gradient).
* --foreach: Adam's multi-tensor path (default on).
* The attention MLP runs on [B * T, 192] rows (2-D GEMMs); ReLUs are in place.
Measured on 2 cores (busy machine, interleaved): fused + sparse was the fastest;
per_table + sparse about as fast when the machine was quiet, slower when busy
(22 sparse Adagrad updates instead of one); dense gradients slower (the whole
~1.1M-row table is read and written by Adagrad every step).
T is the longest sequence of the batch (at most 50), as tzrec-cpp pads.

Usage
-----
    /usr/bin/python3 bench/reference/din_reference.py \\
        --train 'bench/out/din_data/train/*.csv' --eval 'bench/out/din_data/eval/*.csv' \\
        --batch_size 4096 --threads N --warmup_steps W --steps S [--epochs E --seed S]

Prints `reference_samples_per_sec=<float>`, `reference_ms_per_step=<float>` and
a per-phase breakdown for the timed steps (W untimed warm-up steps, then S
timed, cycling through the training batches in file order); with --epochs E, a
fresh model (seeded by --seed, or the weights of a tzrec-cpp checkpoint with
--init_checkpoint) trains E epochs and prints `reference_eval_auc=<float>`
(binned as torchmetrics' BinaryAUROC(thresholds=200), as tzrec-cpp) and
`reference_eval_auc_exact=<float>`.
"""

import argparse
import glob
import math
import os
import re
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_reference import binned_auc, exact_auc  # noqa: E402  (same AUC as the other bench)

# ---------------------------------------------------------------------------
# Features, as in bench/configs/multi_tower_din_taobao_bench.config
# ---------------------------------------------------------------------------
EMBEDDING_DIM = 16
# The DEEP group, in group order: (feature, table rows). price: 98 boundaries -> 99 buckets
# (FG_NONE data holds the bucket index); pid: hash_bucket_size 20.
DEEP = [
    ("user_id", 100000), ("cms_segid", 98), ("cms_group_id", 14), ("final_gender_code", 3),
    ("age_level", 8), ("pvalue_level", 5), ("shopping_level", 5), ("occupation", 3),
    ("new_user_class_level", 6), ("adgroup_id", 100000), ("cate_id", 12961),
    ("campaign_id", 100000), ("customer", 100000), ("brand", 100000), ("price", 99),
    ("pid", 20),
]
# The SEQUENCE group: query features (their own tables) and the sequence's sub-features.
QUERY = [("adgroup_id", 100000), ("cate_id", 12961), ("brand", 100000)]
SEQUENCE = [("click_50_seq__adgroup_id", 100000), ("click_50_seq__cate_id", 12961),
            ("click_50_seq__brand", 100000)]
SEQUENCE_LENGTH = 50
LABEL = "clk"
TOWER_MLP = [512, 256, 128]
ATTN_MLP = [256, 64]
FINAL_MLP = [64]
SPARSE_LR = 0.05
DENSE_LR = 0.001
MULTI_VALUE_SEP = 0x03
SEQUENCE_DELIM = ord("|")
PAD_SCORE = -(2.0 ** 31) + 1

# All tables in fused order: deep, query, sequence. Their base row in the fused table.
TABLES = [rows for _, rows in DEEP + QUERY + SEQUENCE]
BASES = np.concatenate([[0], np.cumsum(TABLES)[:-1]]).astype(np.int64)
TOTAL_ROWS = int(sum(TABLES))
ND, NQ, NS = len(DEEP), len(QUERY), len(SEQUENCE)


def check_config(path):
    """Fails if the bench config's tables, sizes or learning rates differ from the constants."""
    text = re.sub(r"#[^\n]*", "", open(path).read())
    flat = " ".join(text.split())
    rows = [(m.group(1), int(m.group(3)))
            for m in re.finditer(r'feature_name: "(\w+)" (num_buckets|hash_bucket_size): (\d+)', flat)]
    expected = [(n, r) for n, r in DEEP if n not in ("price",)] + \
        [(n.split("__")[1], r) for n, r in SEQUENCE]
    m = re.search(r'raw_feature \{ feature_name: "price" boundaries: \[([^\]]*)\]', flat)
    problems = []
    if rows != expected:
        problems.append("id features %s, expected %s" % (rows, expected))
    if not m or len(m.group(1).split(",")) + 1 != dict(DEEP)["price"]:
        problems.append("price boundaries")
    for pattern, value in [(r"adagrad_optimizer \{ lr: ([0-9.e-]+)", SPARSE_LR),
                           (r"adam_optimizer \{ lr: ([0-9.e-]+)", DENSE_LR),
                           (r"sequence_length: (\d+)", SEQUENCE_LENGTH)]:
        got = re.search(pattern, flat)
        if not got or float(got.group(1)) != value:
            problems.append("%s is %s, expected %s" % (pattern, got and got.group(1), value))
    for name, units in [("towers", TOWER_MLP), ("attn_mlp", ATTN_MLP), ("final", FINAL_MLP)]:
        got = re.search(name + r"[^\[]*hidden_units: \[([^\]]*)\]", flat)
        if not got or [int(x) for x in got.group(1).split(",")] != units:
            problems.append("%s hidden_units" % name)
    if problems:
        sys.exit("%s does not match din_reference.py's constants: %s" % (path, "; ".join(problems)))


# ---------------------------------------------------------------------------
# Data: CSV -> columnar numpy (values + per-row counts) -> per-batch tensors
# ---------------------------------------------------------------------------
def _load_file(path):
    """Parses one FG_NONE CSV file with numpy (no quoting in these files).

    Every cell is split on \\x03 (multi-value) and "|" (sequence steps); all tokens
    of the file are parsed in one pass. Returns header, per-column token values
    (float64, row order), per-column token counts per row, and per-column flags
    of which separators occur.
    """
    with open(path, "rb") as f:
        data = f.read().replace(b"\r", b"")
    nl = data.find(b"\n")
    if nl < 0:
        return None
    header = data[:nl].decode().split(",")
    body = data[nl + 1:]
    if not body:
        return None
    if not body.endswith(b"\n"):
        body += b"\n"
    ncols = len(header)
    raw = np.frombuffer(body, dtype=np.uint8)
    delim = np.flatnonzero((raw == ord(",")) | (raw == ord("\n")))  # cell ends
    if delim.size % ncols:
        sys.exit("%s: %d cells is not a multiple of %d columns" % (path, delim.size, ncols))
    nrows = delim.size // ncols
    starts = np.empty_like(delim)
    starts[0] = 0
    starts[1:] = delim[:-1] + 1
    nonempty = (delim - starts) > 0
    multi = np.bincount(np.searchsorted(delim, np.flatnonzero(raw == MULTI_VALUE_SEP)),
                        minlength=delim.size)
    steps = np.bincount(np.searchsorted(delim, np.flatnonzero(raw == SEQUENCE_DELIM)),
                        minlength=delim.size)
    counts = nonempty.astype(np.int64) + multi + steps  # tokens per cell
    tokens = np.fromstring(body.translate(bytes.maketrans(b",\n\x03|", b"    ")),
                           dtype=np.float64, sep=" ")
    if tokens.size != counts.sum():
        sys.exit("%s: malformed cell (could not parse all values)" % path)
    token_col = np.repeat(np.arange(delim.size) % ncols, counts)
    order = np.argsort(token_col, kind="stable")  # column-major, rows in order
    counts = counts.reshape(nrows, ncols)
    col_tokens = np.split(tokens[order], np.cumsum(counts.sum(0))[:-1])
    has_multi = multi.reshape(nrows, ncols).any(0)
    has_steps = steps.reshape(nrows, ncols).any(0)
    return header, col_tokens, counts, has_multi, has_steps


class Columns:
    """Whole data set, columnar: ids (with the fused table's base added) + counts per row."""

    def __init__(self):
        self.labels = None  # (N,) float32
        self.values = []  # ND + NQ + NS x (nnz,) int64, fused ids
        self.counts = []  # ND + NQ + NS x (N,) int64


def load_csv(pattern):
    paths = sorted(glob.glob(pattern))
    if not paths:
        sys.exit("no files match %r" % pattern)
    names = [n for n, _ in DEEP + QUERY + SEQUENCE]
    labels, values, counts = [], [[] for _ in names], [[] for _ in names]
    for path in paths:
        parsed = _load_file(path)
        if parsed is None:
            continue
        header, col_tokens, cell_counts, has_multi, has_steps = parsed
        index = {name: i for i, name in enumerate(header)}
        missing = [n for n in set(names + [LABEL]) if n not in index]
        if missing:
            sys.exit("%s: header lacks columns %s" % (path, missing))
        j = index[LABEL]
        if (cell_counts[:, j] != 1).any():
            sys.exit("%s: %s: every row needs one label" % (path, LABEL))
        labels.append(col_tokens[j].astype(np.float32))
        for t, name in enumerate(names):
            j = index[name]
            v, c = col_tokens[j], cell_counts[:, j].astype(np.int64)
            ids = v.astype(np.int64)
            if ids.size and (np.any(ids != v) or ids.min() < 0 or ids.max() >= TABLES[t]):
                sys.exit("%s: %s: id not an integer in [0, %d)" % (path, name, TABLES[t]))
            if t < ND and has_steps[j]:
                sys.exit("%s: %s: '|' in a non-sequence column" % (path, name))
            if ND <= t < ND + NQ and (c != 1).any():
                sys.exit("%s: query feature %s needs one id per row" % (path, name))
            if t >= ND + NQ and has_multi[j]:
                sys.exit("%s: %s: multi-value sequence steps are not supported" % (path, name))
            values[t].append(ids + BASES[t])
            counts[t].append(c)
    cols = Columns()
    cols.labels = np.concatenate(labels)
    cols.values = [np.concatenate(v) for v in values]
    cols.counts = [np.concatenate(c) for c in counts]
    seq_counts = cols.counts[ND + NQ:]
    if any((c != seq_counts[0]).any() for c in seq_counts[1:]):
        sys.exit("the sequence sub-features have different step counts")
    if seq_counts[0].max() > SEQUENCE_LENGTH:
        # TorchEasyRec keeps the first sequence_length steps.
        keep = []
        splits = np.concatenate([[0], np.cumsum(seq_counts[0])])
        for t in range(ND + NQ, ND + NQ + NS):
            pos = np.arange(cols.values[t].size) - np.repeat(splits[:-1], seq_counts[0])
            keep.append(cols.values[t][pos < SEQUENCE_LENGTH])
        cols.values[ND + NQ:] = keep
        cols.counts[ND + NQ:] = [np.minimum(seq_counts[0], SEQUENCE_LENGTH)] * NS
    return cols


class Batch:
    __slots__ = ("size", "steps", "labels", "lengths", "mask", "tables")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


def _bags(keys, vals, nbags):
    """Values sorted by bag key (stable), and EmbeddingBag offsets (bag starts)."""
    keys = np.concatenate(keys)
    vals = np.concatenate(vals)
    order = np.argsort(keys, kind="stable")
    offsets = np.zeros(nbags, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=nbags)[:-1], out=offsets[1:])
    return torch.from_numpy(vals[order]), torch.from_numpy(offsets)


def make_batches(cols, batch_size, layout):
    """Cuts the data in file order (the last partial batch is kept) into per-batch tensors.

    fused: one (values, offsets) for the single EmbeddingBag; bag order: deep bags
    (row, feature), then sequence-group bags (row, step, feature) with step 0 the query.
    per_table: per deep feature (values, offsets); per query table (ids [B]); per sequence
    table (ids [B, T], padded with the table's padding row).
    """
    n = cols.labels.size
    splits = [np.concatenate([[0], np.cumsum(c)]) for c in cols.counts]
    batches = []
    for a in range(0, n, batch_size):
        b = min(a + batch_size, n)
        B = b - a
        rows = np.arange(B, dtype=np.int64)
        seg = [(cols.values[t][splits[t][a]:splits[t][b]], cols.counts[t][a:b])
               for t in range(ND + NQ + NS)]
        lengths = seg[ND + NQ][1]
        T = max(int(lengths.max()), 1)
        # step index of each sequence value within its row
        seq_rows = np.repeat(rows, lengths)
        seq_pos = np.arange(seq_rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        if layout == "fused":
            keys, vals = [], []
            for t in range(ND):
                v, c = seg[t]
                keys.append(np.repeat(rows * ND + t, c))
                vals.append(v)
            base = B * ND
            for k in range(NQ):
                keys.append(base + (rows * (T + 1)) * NQ + k)
                vals.append(seg[ND + k][0])
            for k in range(NS):
                keys.append(base + (seq_rows * (T + 1) + 1 + seq_pos) * NS + k)
                vals.append(seg[ND + NQ + k][0])
            tables = _bags(keys, vals, base + B * (T + 1) * NQ)
        else:
            tables = []
            for t in range(ND):
                v, c = seg[t]
                offsets = np.zeros(B, dtype=np.int64)
                np.cumsum(c[:-1], out=offsets[1:])
                tables.append((torch.from_numpy(v - BASES[t]), torch.from_numpy(offsets)))
            for k in range(NQ):
                tables.append(torch.from_numpy(seg[ND + k][0] - BASES[ND + k]))
            for k in range(NS):
                t = ND + NQ + k
                ids = np.full((B, T), TABLES[t], dtype=np.int64)  # the padding row
                ids[seq_rows, seq_pos] = seg[t][0] - BASES[t]
                tables.append(torch.from_numpy(ids))
        batches.append(Batch(size=B, steps=T, tables=tables,
                             labels=torch.from_numpy(cols.labels[a:b].copy()),
                             lengths=torch.from_numpy(lengths.copy())))
    return batches


# ---------------------------------------------------------------------------
# Model (same math as TorchEasyRec / tzrec-cpp)
# ---------------------------------------------------------------------------
def mlp(in_dim, hidden_units):
    """TorchEasyRec MLP: Linear then ReLU for every hidden layer (in place: the same values,
    one allocation less; measured a little faster here)."""
    layers = []
    for h in hidden_units:
        layers += [nn.Linear(in_dim, h), nn.ReLU(inplace=True)]
        in_dim = h
    return nn.Sequential(*layers)


class Din(nn.Module):
    """DIN target attention (TorchEasyRec's DINEncoder)."""

    def __init__(self, query_dim, sequence_dim):
        super().__init__()
        self.query_dim, self.dim = query_dim, sequence_dim
        self.mlp = mlp(4 * sequence_dim, ATTN_MLP)
        self.linear = nn.Linear(ATTN_MLP[-1], 1)

    def forward(self, query, sequence, lengths):
        B, T, D = sequence.shape
        if self.query_dim < D:
            query = nn.functional.pad(query, (0, D - self.query_dim))
        q = query.unsqueeze(1).expand(-1, T, -1)
        attn_in = torch.cat([q, sequence, q - sequence, q * sequence], -1).view(B * T, 4 * D)
        scores = self.linear(self.mlp(attn_in)).view(B, T)
        mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
        scores = torch.where(mask, scores, torch.full_like(scores, PAD_SCORE))
        weights = torch.softmax(scores, -1)
        return torch.bmm(weights.unsqueeze(1), sequence).squeeze(1)


class MultiTowerDIN(nn.Module):
    def __init__(self, layout, sparse):
        super().__init__()
        self.layout = layout
        if layout == "fused":
            self.table = nn.EmbeddingBag(TOTAL_ROWS, EMBEDDING_DIM, mode="sum", sparse=sparse)
            with torch.no_grad():
                for base, rows in zip(BASES, TABLES):
                    bound = math.sqrt(1.0 / rows)
                    self.table.weight[base:base + rows].uniform_(-bound, bound)
        else:
            self.deep_tables = nn.ModuleList(
                nn.EmbeddingBag(rows, EMBEDDING_DIM, mode="sum", sparse=sparse) for _, rows in DEEP)
            self.query_tables = nn.ModuleList(
                nn.Embedding(rows, EMBEDDING_DIM, sparse=sparse) for _, rows in QUERY)
            self.sequence_tables = nn.ModuleList(
                nn.Embedding(rows + 1, EMBEDDING_DIM, padding_idx=rows, sparse=sparse)
                for _, rows in SEQUENCE)
            with torch.no_grad():
                for t, (_, rows) in zip(list(self.deep_tables) + list(self.query_tables), DEEP + QUERY):
                    bound = math.sqrt(1.0 / rows)
                    t.weight.uniform_(-bound, bound)
                for t, (_, rows) in zip(self.sequence_tables, SEQUENCE):
                    bound = math.sqrt(1.0 / rows)
                    t.weight[:rows].uniform_(-bound, bound)
                    t.weight[rows].zero_()
        self.tower = mlp(ND * EMBEDDING_DIM, TOWER_MLP)
        self.din = Din(NQ * EMBEDDING_DIM, NS * EMBEDDING_DIM)
        self.final = mlp(TOWER_MLP[-1] + NS * EMBEDDING_DIM, FINAL_MLP)
        self.output = nn.Linear(FINAL_MLP[-1], 1)

    def embed(self, batch):
        B, T = batch.size, batch.steps
        if self.layout == "fused":
            out = self.table(*batch.tables)
            deep = out[:B * ND].view(B, ND * EMBEDDING_DIM)
            seq = out[B * ND:].view(B, T + 1, NS * EMBEDDING_DIM)  # NQ == NS
            return deep, seq[:, 0], seq[:, 1:]
        tabs = batch.tables
        deep = torch.cat([t(v, o) for t, (v, o) in zip(self.deep_tables, tabs[:ND])], 1)
        query = torch.cat([t(i) for t, i in zip(self.query_tables, tabs[ND:ND + NQ])], 1)
        seq = torch.cat([t(i) for t, i in zip(self.sequence_tables, tabs[ND + NQ:])], 2)
        return deep, query, seq

    def forward(self, batch):
        deep, query, seq = self.embed(batch)
        x = torch.cat([self.tower(deep), self.din(query, seq, batch.lengths)], 1)
        return self.output(self.final(x)).squeeze(1)


def load_tzrec_checkpoint(model, path):
    """Copies the weights of a tzrec-cpp checkpoint directory (model.ckpt-N) into `model`:
    dense parameters from model.pt (a dict of tensors named by tzrec-cpp's module paths),
    tables from embedding/<feature>_emb.pt (deep group) and embedding/<feature>_emb.seq.pt
    (the sequence group's own tables), each a dict with "weight" [rows, dim]. Both sides then
    start from the same weights, so their one-epoch AUCs differ only by the implementations."""
    dense = torch.load(os.path.join(path, "model.pt"))
    names = ([(n, rows, "") for n, rows in DEEP] + [(n, rows, ".seq") for n, rows in QUERY + SEQUENCE])
    with torch.no_grad():
        for i, (name, rows, suffix) in enumerate(names):
            file = os.path.join(path, "embedding", "%s_emb%s.pt" % (name, suffix))
            weight = torch.load(file)["weight"]
            if tuple(weight.shape) != (rows, EMBEDDING_DIM):
                sys.exit("%s: shape %s, expected (%d, %d)" % (file, tuple(weight.shape), rows, EMBEDDING_DIM))
            if model.layout == "fused":
                model.table.weight[BASES[i]:BASES[i] + rows] = weight
            elif i < ND:
                model.deep_tables[i].weight.copy_(weight)
            elif i < ND + NQ:
                model.query_tables[i - ND].weight.copy_(weight)
            else:
                model.sequence_tables[i - ND - NQ].weight[:rows] = weight
        pairs = []
        for j, layer in enumerate(l for l in model.tower if isinstance(l, nn.Linear)):
            pairs.append((layer, "towers.0.mlp.%d.perceptron.0" % j))
        for j, layer in enumerate(l for l in model.din.mlp if isinstance(l, nn.Linear)):
            pairs.append((layer, "din_tower_0.mlp.mlp.%d.perceptron.0" % j))
        pairs.append((model.din.linear, "din_tower_0.linear"))
        for j, layer in enumerate(l for l in model.final if isinstance(l, nn.Linear)):
            pairs.append((layer, "final_mlp.mlp.%d.perceptron.0" % j))
        pairs.append((model.output, "output_mlp"))
        for layer, prefix in pairs:
            for attr in ("weight", "bias"):
                src = dense.get(prefix + "." + attr)
                dst = getattr(layer, attr)
                if src is None or tuple(src.shape) != tuple(dst.shape):
                    sys.exit("%s/model.pt: %s.%s missing or of another shape" % (path, prefix, attr))
                dst.copy_(src)
        if len(dense) != 2 * len(pairs):
            sys.exit("%s/model.pt: %d tensors, expected %d" % (path, len(dense), 2 * len(pairs)))


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------
class Trainer:
    def __init__(self, args, seed):
        torch.manual_seed(seed)
        self.model = MultiTowerDIN(args.layout, args.grad == "sparse")
        if getattr(args, "init_checkpoint", ""):
            load_tzrec_checkpoint(self.model, args.init_checkpoint)
        sparse_params, dense_params = [], []
        for module in self.model.modules():
            if isinstance(module, (nn.EmbeddingBag, nn.Embedding)):
                sparse_params.append(module.weight)
            else:
                dense_params.extend(module.parameters(recurse=False))
        self.sparse_opt = torch.optim.Adagrad(sparse_params, lr=SPARSE_LR, eps=1e-8)
        self.dense_opt = torch.optim.Adam(dense_params, lr=DENSE_LR, foreach=args.foreach)
        self.loss_fn = nn.BCEWithLogitsLoss()  # reduction="mean"
        self.phase_s = {"forward": 0.0, "backward": 0.0, "sparse_step": 0.0, "dense_step": 0.0}

    def step(self, batch, profile=False):
        t0 = time.perf_counter()
        self.sparse_opt.zero_grad(set_to_none=True)
        self.dense_opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(batch), batch.labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.sparse_opt.step()
        t3 = time.perf_counter()
        self.dense_opt.step()
        t4 = time.perf_counter()
        if profile:
            p = self.phase_s
            p["forward"] += t1 - t0
            p["backward"] += t2 - t1
            p["sparse_step"] += t3 - t2
            p["dense_step"] += t4 - t3
        return loss

    @torch.no_grad()
    def predict(self, batches):
        self.model.eval()
        probs = [torch.sigmoid(self.model(b)) for b in batches]
        self.model.train()
        return torch.cat(probs).numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True, help="glob of train CSV files")
    ap.add_argument("--eval", default="", help="glob of eval CSV files (needed with --epochs)")
    ap.add_argument("--config", default="", help="bench config to check the constants against")
    ap.add_argument("--batch_size", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup_steps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="timed steps; 0 skips the timed run")
    ap.add_argument("--epochs", type=int, default=0,
                    help="if > 0: train this many epochs from a fresh model, then eval AUC")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--init_checkpoint", default="",
                    help="start --epochs training from this tzrec-cpp checkpoint's weights "
                         "(fresh optimizer state) instead of a --seed initialisation")
    ap.add_argument("--layout", choices=["fused", "per_table"], default="fused")
    ap.add_argument("--grad", choices=["sparse", "dense"], default="sparse")
    ap.add_argument("--foreach", type=int, default=1, help="Adam's multi-tensor path (1/0)")
    args = ap.parse_args()
    args.foreach = bool(args.foreach)
    if args.epochs > 0 and not args.eval:
        ap.error("--epochs needs --eval")
    if args.config:
        check_config(args.config)

    torch.set_num_threads(args.threads)
    print("torch=%s numpy=%s threads=%d batch_size=%d layout=%s grad=%s foreach=%s" % (
        torch.__version__, np.__version__, torch.get_num_threads(), args.batch_size,
        args.layout, args.grad, args.foreach))

    t = time.perf_counter()
    train_batches = make_batches(load_csv(args.train), args.batch_size, args.layout)
    eval_batches = (make_batches(load_csv(args.eval), args.batch_size, args.layout)
                    if args.epochs > 0 else [])
    print("loaded %d train batches (%d rows, mean %.1f sequence steps, padded to %.1f), "
          "%d eval batches in %.1fs (not timed)" % (
              len(train_batches), sum(b.size for b in train_batches),
              sum(b.lengths.sum().item() for b in train_batches) / sum(b.size for b in train_batches),
              np.mean([b.steps for b in train_batches]), len(eval_batches),
              time.perf_counter() - t))

    if args.steps > 0:
        t = time.perf_counter()
        trainer = Trainer(args, args.seed)
        print("model built in %.1fs (not timed)" % (time.perf_counter() - t))
        nb = len(train_batches)
        for i in range(args.warmup_steps):
            trainer.step(train_batches[i % nb])
        samples = 0
        start = time.perf_counter()
        for i in range(args.warmup_steps, args.warmup_steps + args.steps):
            batch = train_batches[i % nb]
            loss = trainer.step(batch, profile=True)
            samples += batch.size
        elapsed = time.perf_counter() - start
        print("timed %d steps (%d warmup) in %.3fs, last loss %.5f" % (
            args.steps, args.warmup_steps, elapsed, loss.item()))
        for name, s in trainer.phase_s.items():
            print("  phase %-11s %8.2f ms/step (%4.1f%%)" % (
                name, 1000.0 * s / args.steps, 100.0 * s / elapsed))
        print("reference_ms_per_step=%.3f" % (1000.0 * elapsed / args.steps))
        print("reference_samples_per_sec=%.1f" % (samples / elapsed))
        del trainer

    if args.epochs > 0:
        trainer = Trainer(args, args.seed)
        t = time.perf_counter()
        for epoch in range(args.epochs):
            total, count = 0.0, 0
            for batch in train_batches:
                total += trainer.step(batch).item() * batch.size
                count += batch.size
            print("epoch %d: mean train loss %.5f (%.1fs so far)" % (
                epoch + 1, total / count, time.perf_counter() - t))
        probs = trainer.predict(eval_batches)
        labels = torch.cat([b.labels for b in eval_batches]).numpy()
        print("eval rows %d, positive rate %.4f" % (labels.size, labels.mean()))
        print("reference_eval_auc=%.6f" % binned_auc(probs, labels))
        print("reference_eval_auc_exact=%.6f" % exact_auc(probs, labels))


if __name__ == "__main__":
    main()
