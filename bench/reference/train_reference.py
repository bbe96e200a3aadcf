#!/usr/bin/python3
"""Eager-PyTorch reference trainer for the tzrec-cpp throughput benchmark.

What it is for
--------------
bench/ compares tzrec-cpp's training throughput (and, as a sanity check, its
eval AUC) against a plain PyTorch eager-mode implementation of the same
models. This file is that reference. It mirrors, layer by layer, the two
benchmark configs

    bench/configs/deepfm_criteo_bench.config
    bench/configs/dlrm_criteo_bench.config

i.e. the same features (int_0..int_12 raw dense, cat_0..cat_25 id features
with the table sizes below, embedding dim 16, sum pooling), the same feature
groups, MLP shapes, loss (BCEWithLogits, mean), and optimizers (sparse Adagrad
lr 0.01 eps 1e-8 for embeddings, Adam lr 0.001 for dense parameters). If you
change those configs, change TABLE_ROWS / the model classes here too.

It uses only the standard library, numpy and torch (run it with Debian's
/usr/bin/python3, which has python3-torch 1.13). No TorchRec, no FBGEMM: the
embeddings are nn.EmbeddingBag(mode="sum", sparse=True), one table per
feature (plus one "<name>_wide" table of dim 4 per feature for DeepFM's wide
group), and the sparse optimizer is torch.optim.Adagrad on sparse gradients.

Usage
-----
    /usr/bin/python3 bench/reference/train_reference.py --model deepfm|dlrm \
        --train 'bench/out/data/train/*.csv' --eval 'bench/out/data/eval/*.csv' \
        --batch_size 4096 --threads N --warmup_steps W --steps S [--epochs E]

* All CSV data is parsed and cut into per-batch tensors before any timing.
* Throughput: W untimed warmup steps, then S timed steps (wall clock),
  cycling through the training batches in file order. Prints
  `reference_samples_per_sec=<float>` and `reference_ms_per_step=<float>`,
  plus a per-phase breakdown (forward / backward / sparse step / dense step).
  --steps 0 skips the timed run.
* AUC: with --epochs E, a fresh model (same seed) trains E full epochs over the
  train data (file order, last partial batch kept), then evaluates on the eval
  data and prints `reference_eval_auc=<float>` (binned like torchmetrics'
  BinaryAUROC(thresholds=200) and like tzrec-cpp's src/tzrec/metrics/auc.cc)
  and `reference_eval_auc_exact=<float>` (sort-based, ties averaged).
"""

import argparse
import glob
import math
import sys
import time

import numpy as np
import torch
from torch import nn

# ---------------------------------------------------------------------------
# Features, as in bench/configs/*_criteo_bench.config
# ---------------------------------------------------------------------------
DENSE_FEATURES = ["int_%d" % i for i in range(13)]
SPARSE_FEATURES = ["cat_%d" % i for i in range(26)]
LABEL = "label"
MULTI_VALUE_SEP = b"\x03"  # joins the ids of a multi-value cell
EMBEDDING_DIM = 16
WIDE_EMBEDDING_DIM = 4  # model_config.deepfm.wide_embedding_dim default
MAX_TABLE_ROWS = 1_000_000
# id_feature num_buckets of cat_0..cat_25 (already capped at 1M in the configs).
TABLE_ROWS = [
    1000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 1000000, 1000000,
    405282, 10, 2209, 11938, 155, 4, 976, 14, 1000000, 1000000, 1000000,
    590152, 12973, 108, 36,
]
TABLE_ROWS = [min(r, MAX_TABLE_ROWS) for r in TABLE_ROWS]
AUC_THRESHOLDS = 200


# ---------------------------------------------------------------------------
# Data: CSV -> columnar numpy -> list of per-batch tensors
# ---------------------------------------------------------------------------
class Columns:
    """Whole data set, columnar. Sparse features are jagged: values + row_splits."""

    def __init__(self, dense, labels, sparse_values, sparse_splits):
        self.dense = dense  # (N, 13) float32
        self.labels = labels  # (N,) float32
        self.sparse_values = sparse_values  # 26 x (nnz,) int64
        self.sparse_splits = sparse_splits  # 26 x (N+1,) int64

    @property
    def num_rows(self):
        return self.labels.shape[0]


def _load_file(path):
    """Parses one CSV file with numpy (no quoting in these files).

    Every cell is split on the multi-value byte \\x03 and all tokens of the file
    are parsed in one numpy pass; a token's cell (and so its row and column)
    follows from the cell boundaries. Returns header, per-column token values
    (float64, in row order) and per-column token counts per row.
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
    multi = np.bincount(np.searchsorted(delim, np.flatnonzero(raw == MULTI_VALUE_SEP[0])),
                        minlength=delim.size)
    counts = nonempty.astype(np.int64) + multi  # tokens per cell
    tokens = np.fromstring(body.translate(bytes.maketrans(b",\n" + MULTI_VALUE_SEP, b"   ")),
                           dtype=np.float64, sep=" ")
    if tokens.size != counts.sum():
        sys.exit("%s: malformed cell (could not parse all values)" % path)
    token_col = np.repeat(np.arange(delim.size) % ncols, counts)
    order = np.argsort(token_col, kind="stable")  # column-major, rows in order
    counts = counts.reshape(nrows, ncols)
    col_tokens = np.split(tokens[order], np.cumsum(counts.sum(0))[:-1])
    return header, col_tokens, counts


def load_csv(pattern):
    paths = sorted(glob.glob(pattern))
    if not paths:
        sys.exit("no files match %r" % pattern)
    dense_parts, label_parts = [], []
    values_parts = [[] for _ in SPARSE_FEATURES]
    lengths_parts = [[] for _ in SPARSE_FEATURES]
    for path in paths:
        parsed = _load_file(path)
        if parsed is None:
            continue
        header, col_tokens, counts = parsed
        index = {name: i for i, name in enumerate(header)}
        missing = [n for n in DENSE_FEATURES + SPARSE_FEATURES + [LABEL] if n not in index]
        if missing:
            sys.exit("%s: header lacks columns %s" % (path, missing))

        def scalar_column(name):  # an empty cell counts as 0
            j = index[name]
            if counts[:, j].max() > 1:
                sys.exit("%s: %s has multi-value cells" % (path, name))
            out = np.zeros(counts.shape[0], dtype=np.float64)
            out[counts[:, j] == 1] = col_tokens[j]
            return out.astype(np.float32)

        dense_parts.append(np.stack([scalar_column(n) for n in DENSE_FEATURES], 1))
        label_parts.append(scalar_column(LABEL))
        for k, name in enumerate(SPARSE_FEATURES):
            v = col_tokens[index[name]]
            ids = v.astype(np.int64)
            if ids.size and (np.any(ids != v) or ids.min() < 0 or ids.max() >= TABLE_ROWS[k]):
                sys.exit("%s: %s: id not an integer in [0, %d)" % (path, name, TABLE_ROWS[k]))
            values_parts[k].append(ids)
            lengths_parts[k].append(counts[:, index[name]])
    splits = []
    for k in range(len(SPARSE_FEATURES)):
        lengths = np.concatenate(lengths_parts[k])
        s = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=s[1:])
        splits.append(s)
    return Columns(np.concatenate(dense_parts), np.concatenate(label_parts),
                   [np.concatenate(v) for v in values_parts], splits)


class Batch:
    __slots__ = ("dense", "labels", "values", "offsets", "size")

    def __init__(self, dense, labels, values, offsets):
        self.dense = dense  # (B, 13) float32
        self.labels = labels  # (B,) float32
        self.values = values  # 26 x (nnz_b,) int64, EmbeddingBag input
        self.offsets = offsets  # 26 x (B,) int64, EmbeddingBag offsets (bag starts)
        self.size = labels.shape[0]


def make_batches(cols, batch_size):
    """Cuts the data in file order; the last partial batch is kept."""
    batches = []
    n = cols.num_rows
    for start in range(0, n, batch_size):
        end = min(start + batch_size, n)
        values, offsets = [], []
        for k in range(len(SPARSE_FEATURES)):
            s = cols.sparse_splits[k]
            lo, hi = s[start], s[end]
            values.append(torch.from_numpy(cols.sparse_values[k][lo:hi].copy()))
            offsets.append(torch.from_numpy(s[start:end] - lo))
        batches.append(Batch(torch.from_numpy(cols.dense[start:end].copy()),
                             torch.from_numpy(cols.labels[start:end].copy()),
                             values, offsets))
    return batches


# ---------------------------------------------------------------------------
# Models (same math as TorchEasyRec / tzrec-cpp)
# ---------------------------------------------------------------------------
def make_tables(dim):
    tables = nn.ModuleList()
    for rows in TABLE_ROWS:
        bag = nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
        bound = math.sqrt(1.0 / rows)
        with torch.no_grad():
            bag.weight.uniform_(-bound, bound)
        tables.append(bag)
    return tables


def pooled_lookup(tables, batch):
    return [t(v, o) for t, v, o in zip(tables, batch.values, batch.offsets)]


def mlp(in_dim, hidden_units):
    """TorchEasyRec MLP: Linear then ReLU for every hidden layer."""
    layers = []
    for h in hidden_units:
        layers += [nn.Linear(in_dim, h), nn.ReLU()]
        in_dim = h
    return nn.Sequential(*layers)


class DeepFM(nn.Module):
    """Groups: wide (26 cat, own dim-4 tables), fm (26 cat), deep (13 dense + 26 cat).

    fm and deep use the same cat_* tables (one lookup per feature).
    """

    def __init__(self):
        super().__init__()
        self.tables = make_tables(EMBEDDING_DIM)  # cat_k, shared by fm and deep
        self.wide_tables = make_tables(WIDE_EMBEDDING_DIM)  # cat_k_wide
        deep_in = len(DENSE_FEATURES) + EMBEDDING_DIM * len(SPARSE_FEATURES)  # 429
        self.deep_mlp = mlp(deep_in, [512, 256, 128])
        self.final_mlp = mlp(1 + EMBEDDING_DIM + 128, [64])
        self.output_mlp = nn.Linear(64, 1)

    def forward(self, batch):
        wide = torch.cat(pooled_lookup(self.wide_tables, batch), 1)  # (B, 104)
        y_wide = wide.sum(1, keepdim=True)  # (B, 1)
        emb = pooled_lookup(self.tables, batch)  # 26 x (B, 16)
        fm_in = torch.stack(emb, 1)  # (B, 26, 16)
        s = fm_in.sum(1)
        y_fm = 0.5 * (s * s - (fm_in * fm_in).sum(1))  # (B, 16)
        y_deep = self.deep_mlp(torch.cat([batch.dense] + emb, 1))  # (B, 128)
        y = self.output_mlp(self.final_mlp(torch.cat([y_wide, y_fm, y_deep], 1)))
        return y.squeeze(1)


class DLRM(nn.Module):
    """Groups: dense (13 raw) -> dense_mlp [64, 16]; sparse (26 cat); arch_with_sparse."""

    def __init__(self):
        super().__init__()
        self.tables = make_tables(EMBEDDING_DIM)
        self.dense_mlp = mlp(len(DENSE_FEATURES), [64, 16])
        n = len(SPARSE_FEATURES) + 1  # 27
        rows, cols = torch.triu_indices(n, n, offset=1)
        self.register_buffer("triu_rows", rows, persistent=False)
        self.register_buffer("triu_cols", cols, persistent=False)
        num_interactions = n * (n - 1) // 2  # 351
        final_in = num_interactions + EMBEDDING_DIM + EMBEDDING_DIM * len(SPARSE_FEATURES)
        self.final_mlp = mlp(final_in, [64, 32])
        self.output_mlp = nn.Linear(32, 1)

    def forward(self, batch):
        dense = self.dense_mlp(batch.dense)  # (B, 16)
        sparse = torch.stack(pooled_lookup(self.tables, batch), 1)  # (B, 26, 16)
        feat = torch.cat([dense.unsqueeze(1), sparse], 1)  # (B, 27, 16)
        inter = torch.bmm(feat, feat.transpose(1, 2))[:, self.triu_rows, self.triu_cols]
        x = torch.cat([inter, dense, sparse.flatten(1)], -1)  # (B, 351+16+416)
        return self.output_mlp(self.final_mlp(x)).squeeze(1)


MODELS = {"deepfm": DeepFM, "dlrm": DLRM}


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------
class Trainer:
    def __init__(self, model_name, seed, autocast=""):
        torch.manual_seed(seed)
        # --autocast bf16: PyTorch's CPU mixed precision (linear/matmul in bfloat16 through
        # oneDNN, the rest fp32), the eager counterpart of tzrec's train_config.mixed_precision.
        self.autocast = autocast
        self.model = MODELS[model_name]()
        sparse_params, dense_params = [], []
        for module in self.model.modules():
            if isinstance(module, nn.EmbeddingBag):
                sparse_params.append(module.weight)
            else:
                dense_params.extend(module.parameters(recurse=False))
        self.sparse_opt = torch.optim.Adagrad(sparse_params, lr=0.01, eps=1e-8)
        self.dense_opt = torch.optim.Adam(dense_params, lr=0.001)
        self.loss_fn = nn.BCEWithLogitsLoss()  # reduction="mean"
        self.phase_s = {"forward": 0.0, "backward": 0.0, "sparse_step": 0.0, "dense_step": 0.0}

    def step(self, batch, profile=False):
        t0 = time.perf_counter()
        self.sparse_opt.zero_grad(set_to_none=True)
        self.dense_opt.zero_grad(set_to_none=True)
        if self.autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = self.model(batch)
            loss = self.loss_fn(logits.float(), batch.labels)
        else:
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
        if self.autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                probs = [torch.sigmoid(self.model(b).float()) for b in batches]
        else:
            probs = [torch.sigmoid(self.model(b)) for b in batches]
        self.model.train()
        return torch.cat(probs).numpy()


# ---------------------------------------------------------------------------
# AUC (as src/tzrec/metrics/auc.cc)
# ---------------------------------------------------------------------------
def binned_auc(probs, labels, num_thresholds=AUC_THRESHOLDS):
    """torchmetrics BinaryAUROC(thresholds=N): positive at t iff prob >= t; trapezoid ROC."""
    thresholds = (np.arange(num_thresholds, dtype=np.float64)
                  / (num_thresholds - 1)).astype(np.float32)
    bins = np.searchsorted(thresholds, probs.astype(np.float32), side="right")  # upper_bound
    pos = labels > 0.5
    pos_hist = np.bincount(bins[pos], minlength=num_thresholds + 1)
    neg_hist = np.bincount(bins[~pos], minlength=num_thresholds + 1)
    # tp[k] = positives with prob >= thresholds[k] = those in bins k+1..N
    tp = np.cumsum(pos_hist[::-1])[::-1][1:].astype(np.float64)
    fp = np.cumsum(neg_hist[::-1])[::-1][1:].astype(np.float64)
    p, n = pos_hist.sum(), neg_hist.sum()
    tpr = tp / p if p > 0 else np.zeros_like(tp)
    fpr = fp / n if n > 0 else np.zeros_like(fp)
    area = 0.0
    for k in range(num_thresholds - 1, 0, -1):
        area += (fpr[k - 1] - fpr[k]) * (tpr[k - 1] + tpr[k]) * 0.5
    return float(area)


def exact_auc(probs, labels):
    """Mann-Whitney U with average ranks for ties."""
    order = np.argsort(probs, kind="mergesort")
    sorted_probs = probs[order]
    # average 1-based rank per tie group
    change = np.concatenate([[True], sorted_probs[1:] != sorted_probs[:-1]])
    group = np.cumsum(change) - 1
    starts = np.flatnonzero(change)
    ends = np.concatenate([starts[1:], [len(probs)]])
    avg_rank = (starts + ends - 1) / 2.0 + 1.0
    ranks = avg_rank[group]
    pos = labels[order] > 0.5
    p, n = int(pos.sum()), int((~pos).sum())
    if p == 0 or n == 0:
        return 0.0
    u = ranks[pos].sum() - p * (p + 1) / 2.0
    return float(u / (p * n))


# ---------------------------------------------------------------------------
def openblas_core():
    """The kernel set of the OpenBLAS in this process (what OPENBLAS_CORETYPE chose)."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "not-openblas"


def gemm_gflops():
    """GFLOP/s of a 4096x512x256 torch.mm, the probe tzrec_micro_bench gemm runs on our side."""
    a, b = torch.full((4096, 512), 0.01), torch.full((512, 256), 0.02)
    for _ in range(3):
        torch.mm(a, b)
    start = time.perf_counter()
    for _ in range(20):
        torch.mm(a, b)
    return 20 * 2.0 * 4096 * 512 * 256 / (time.perf_counter() - start) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--train", required=True, help="glob of train CSV files")
    ap.add_argument("--eval", default="", help="glob of eval CSV files (needed with --epochs)")
    ap.add_argument("--batch_size", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup_steps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50, help="timed steps; 0 skips the timed run")
    ap.add_argument("--epochs", type=int, default=0,
                    help="if > 0: train this many epochs from a fresh model, then eval AUC")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--autocast", choices=["", "bf16"], default="",
                    help="bf16: train and predict under torch.autocast('cpu', bfloat16)")
    ap.add_argument("--predict_passes", type=int, default=0,
                    help="if > 0: time this many forward passes over the --train rows "
                         "(pre-loaded batches, no I/O) and print reference_predict_rows_per_sec")
    args = ap.parse_args()
    if args.epochs > 0 and not args.eval:
        ap.error("--epochs needs --eval")

    torch.set_num_threads(args.threads)
    print("torch=%s numpy=%s threads=%d model=%s batch_size=%d blas_core=%s gemm_gflops=%.0f" % (
        torch.__version__, np.__version__, torch.get_num_threads(), args.model, args.batch_size,
        openblas_core(), gemm_gflops()))

    t = time.perf_counter()
    train_batches = make_batches(load_csv(args.train), args.batch_size)
    eval_batches = make_batches(load_csv(args.eval), args.batch_size) if args.epochs > 0 else []
    print("loaded %d train batches (%d rows), %d eval batches in %.1fs (not timed)" % (
        len(train_batches), sum(b.size for b in train_batches), len(eval_batches),
        time.perf_counter() - t))

    if args.steps > 0:
        t = time.perf_counter()
        trainer = Trainer(args.model, args.seed, args.autocast)
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

    if args.predict_passes > 0:
        trainer = Trainer(args.model, args.seed, args.autocast)
        trainer.predict(train_batches[:2])  # warm-up
        rows = 0
        start = time.perf_counter()
        for _ in range(args.predict_passes):
            trainer.predict(train_batches)
            rows += sum(b.size for b in train_batches)
        elapsed = time.perf_counter() - start
        print("reference_predict_rows_per_sec=%.1f" % (rows / elapsed))
        del trainer

    if args.epochs > 0:
        trainer = Trainer(args.model, args.seed, args.autocast)
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
