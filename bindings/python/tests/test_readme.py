"""The Python example of the top-level README runs as written (on a real .h5ad written by
anndata and a ChromData store of make_stores.py)."""
from __future__ import annotations

import re
import shutil

from conftest import ROOT


def test_readme_python_example(tmp_path, h5ad_dir, stores, monkeypatch, capsys):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "one Python example in README.md"
    shutil.copy(h5ad_dir / "csr.h5ad", tmp_path / "pbmc.h5ad")
    shutil.copy(stores / "main_22.cdz", tmp_path / "run.cdz")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile("import anndata\n" + blocks[0], "README.md", "exec"), scope)
    assert scope["m"].shape[0] == 3 and scope["spots"].num_rows > 0
    assert "DC_ERR_NOT_FOUND" in capsys.readouterr().out
    assert sum(len(p) for p in scope["parts"]) == scope["ds"].n_cells
