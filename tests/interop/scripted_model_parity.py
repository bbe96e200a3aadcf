"""Runs tzrec's scripted_model.pt in Python torch on the inputs of a cases file and prints, as
JSON, the largest difference from the predictions tzrec computed for them.

Usage: /usr/bin/python3 scripted_model_parity.py scripted_model.pt cases.json
cases.json: {"inputs": {name: {"dtype": "int64"|"float32", "shape": [...], "data": [...]}},
             "outputs": {name: [flattened values]}}
"""
import json
import sys

import torch


def main():
    model_path, cases_path = sys.argv[1], sys.argv[2]
    model = torch.jit.load(model_path)
    model.eval()
    with open(cases_path) as f:
        cases = json.load(f)
    dtypes = {"int64": torch.int64, "float32": torch.float32}
    data = {}
    for name, spec in cases["inputs"].items():
        data[name] = torch.tensor(spec["data"], dtype=dtypes[spec["dtype"]]).reshape(spec["shape"])
    with torch.no_grad():
        predictions = model(data)
    worst = 0.0
    for name, expected in cases["outputs"].items():
        got = predictions[name].to(torch.float64).flatten()
        want = torch.tensor(expected, dtype=torch.float64)
        if got.shape != want.shape:
            raise SystemExit(f"{name}: shape {list(got.shape)}, expected {list(want.shape)}")
        worst = max(worst, (got - want).abs().max().item())
    print(json.dumps({"torch": torch.__version__, "max_abs_diff": worst,
                      "outputs": sorted(predictions.keys()),
                      "parameters": sum(1 for _ in model.parameters())}))


if __name__ == "__main__":
    main()
