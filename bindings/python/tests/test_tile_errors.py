"""Single tiles, and the error translation: status names, messages, classes, pickling."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import deltacells as dc
from deltacells import tile


def test_tile_round_trip(chr21):
    m, _ = chr21
    block = m[:300]
    blob = tile.encode(block, zstd_level=3, n_chunks=4)
    info = tile.inspect(blob)
    assert (info.n_cells, info.n_genes, info.nnz) == (300, m.shape[1], block.nnz)
    assert (info.n_chunks, info.total_size) == (4, len(blob))
    assert (tile.decode(blob) != block).nnz == 0
    arrays = tile.decode(bytearray(blob), dtype=np.float32, threads=1, format="arrays")
    assert np.array_equal(arrays.values, block.data.astype(np.float32))


def test_corrupt_tiles_raise(chr21):
    m, _ = chr21
    blob = bytearray(tile.encode(m[:100], zstd_level=3))
    blob[len(blob) // 2] ^= 0xFF
    with pytest.raises(dc.ChecksumError) as e:
        tile.decode(bytes(blob))
    assert e.value.status == 5 and e.value.status_name == "DC_ERR_CHECKSUM"
    assert isinstance(e.value, dc.FormatError)
    with pytest.raises(dc.FormatError):
        tile.inspect(b"not a tile at all")
    with pytest.raises(dc.DeltaCellsError):
        tile.decode(bytes(blob), verify_crc=False)
    negative = m[:10].copy()
    negative.data[:] = -1
    with pytest.raises(dc.InvalidArgumentError, match="dc_tile_encode"):
        tile.encode(negative)


def test_error_attributes_and_pickling(tmp_path):
    with pytest.raises(dc.NotFoundError) as e:
        dc.Dataset(tmp_path / "missing.dc")
    err = e.value
    assert err.function == "dc_dataset_open" and err.status_name == "DC_ERR_NOT_FOUND"
    assert str(tmp_path / "missing.dc") in err.message
    assert str(err) == f"dc_dataset_open: DC_ERR_NOT_FOUND: {err.message}"
    assert isinstance(err, LookupError)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is dc.NotFoundError and str(back) == str(err) and back.status == err.status
    assert dc.status_name(4) == "DC_ERR_FORMAT"
    assert dc.last_error() == err.message  # still the thread's last error
    with pytest.raises(dc.NotFoundError):
        dc.ChromData(tmp_path / "missing.cdz")
    assert dc.abi_version() == 1
    assert dc.__version__.count(".") == 2
