"""``export(meta_model, args, weights=...)``: a model built on the meta device exported with weights streamed from
safetensors files or a state dict; the files are read only when the model is saved, file to file."""

from __future__ import annotations

import os

import onnx_ir as ir
import pytest
import torch

import onnxport
from onnxport.weights import Weights

safetensors = pytest.importorskip("safetensors.torch")


class Net(torch.nn.Module):
    """Two linears sharing an embedding-like weight (tied), a norm, and a buffer computed in ``__init__``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(8, 16, bias=False)
        self.norm = torch.nn.LayerNorm(16)
        self.out = torch.nn.Linear(16, 8, bias=False)
        self.back = torch.nn.Linear(8, 16, bias=False)
        self.back.weight = self.embed.weight  # tied: one tensor, two names
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.embed(x)) * self.scale
        return self.back(self.out(h)) + h


def _real_and_meta() -> tuple[Net, Net]:
    torch.manual_seed(0)
    real = Net().eval()
    with torch.device("meta"):
        meta = Net().eval()
    meta.scale = real.scale.clone()  # computed in __init__, not a weight: the model's own value
    return real, meta


@pytest.mark.parametrize("source", ["file", "directory", "list", "state_dict"])
def test_meta_model_with_streamed_weights_matches_the_real_one(source: str, tmp_path) -> None:
    real, meta = _real_and_meta()
    state = {k: v for k, v in real.state_dict().items() if k != "back.weight"}  # the checkpoint holds one name
    path = str(tmp_path / "model.safetensors")
    safetensors.save_file(state, path)
    weights = {"file": path, "directory": str(tmp_path), "list": [path], "state_dict": state}[source]
    x = torch.randn(3, 8)
    prog = onnxport.export(meta, (x,), weights=weights)
    assert "never loaded" in prog.report.unverified and prog.report.verification is None
    torch.testing.assert_close(prog(x), real(x).detach(), atol=1e-5, rtol=1e-5)
    assert all(p.is_meta for p in meta.parameters())  # the model is left as it was given
    prog.save(tmp_path / "net.onnx")  # streamed weights go to external data by default
    assert [f for f in os.listdir(tmp_path) if f.startswith("net.onnx.") and f.endswith(".data")]
    saved = ir.load(str(tmp_path / "net.onnx")).graph.initializers
    torch.testing.assert_close(torch.from_numpy(saved["norm.weight"].const_value.numpy().copy()), real.norm.weight.detach())


def test_file_weights_stay_in_the_file_until_saved(tmp_path) -> None:
    real, meta = _real_and_meta()
    path = str(tmp_path / "model.safetensors")
    safetensors.save_file({k: v for k, v in real.state_dict().items() if k != "back.weight"}, path)
    prog = onnxport.export(meta, (torch.randn(3, 8),), weights=path)
    lazy = [v.const_value for v in prog.model.graph.initializers.values() if v.name != "scale"]
    assert lazy and all(isinstance(t, ir.LazyTensor) for t in lazy)
    # out.weight is stored transposed for its MatMul: read from the file and transposed when written
    sources = [t.raw() if t.name != "out.weight" else t.raw().raw.raw() for t in lazy]
    assert all(isinstance(t, ir.ExternalTensor) for t in sources) and {t.path for t in sources} == {path}


def test_weights_in_another_dtype_are_converted_to_the_model_s(tmp_path) -> None:
    real, meta = _real_and_meta()
    path = str(tmp_path / "model.safetensors")
    safetensors.save_file({k: v.half() for k, v in real.state_dict().items() if k != "back.weight"}, path)
    x = torch.randn(3, 8)
    prog = onnxport.export(meta, (x,), weights=path)
    assert prog.model.graph.initializers["out.weight"].dtype == ir.DataType.FLOAT
    real.load_state_dict({k: v.half().float() for k, v in real.state_dict().items()})
    torch.testing.assert_close(prog(x), real(x).detach(), atol=1e-5, rtol=1e-5)


def test_a_meta_tensor_the_weights_lack_is_named(tmp_path) -> None:
    real, meta = _real_and_meta()
    state = {k: v for k, v in real.state_dict().items() if not k.startswith("norm.")}
    with pytest.raises(onnxport.InvalidInputError, match=r"not in weights: norm\.weight, norm\.bias"):
        onnxport.export(meta, (torch.randn(3, 8),), weights=state)
    assert all(p.is_meta for p in meta.parameters())


def test_a_weight_of_another_shape_is_refused(tmp_path) -> None:
    real, meta = _real_and_meta()
    state = dict(real.state_dict(), **{"out.weight": torch.zeros(8, 15)})
    with pytest.raises(onnxport.InvalidInputError, match=r"out\.weight has shape \[8, 15\], the model's is \[8, 16\]"):
        onnxport.export(meta, (torch.randn(3, 8),), weights=state)


@pytest.mark.parametrize(("weights", "message"), [
    (42, "weights cannot be a int"),
    ({"embed.weight": [1.0]}, "weights maps 'embed.weight' to a list"),
    ("/no/such/file.safetensors", "does not exist"),
])
def test_bad_weights_are_refused(weights: object, message: str) -> None:
    _, meta = _real_and_meta()
    with pytest.raises(onnxport.InvalidInputError, match=message):
        onnxport.export(meta, (torch.randn(3, 8),), weights=weights)


def test_a_file_that_is_not_safetensors_is_refused(tmp_path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"not a safetensors file at all")
    with pytest.raises(onnxport.InvalidInputError, match="not a safetensors file"):
        Weights.open(str(path))


def _with_header(path, header: bytes, data: bytes = b"\0" * 16) -> None:
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)


@pytest.mark.parametrize("header, index", [
    (b'[1, 2]', None),                                                          # not a table of tensors
    (b'{"w": {"dtype": "F32", "shape": [2]}}', None),                           # no data_offsets
    (b'{"w": {"dtype": "F32", "shape": "two", "data_offsets": [0, 8]}}', None),  # a shape that is no list
    (None, '{"weight_map": '),                                                  # an index that is no JSON
    (None, '{"metadata": {}}'),                                                 # an index without its map
    (None, '{"weight_map": {"w": 3}}'),                                         # a map to no file name
])
def test_corrupt_checkpoints_are_named(tmp_path, header, index) -> None:
    """A broken safetensors header or sharded index is an InvalidInputError naming the file, never a
    KeyError or JSONDecodeError from inside."""
    _, meta = _real_and_meta()
    if header is not None:
        _with_header(tmp_path / "model.safetensors", header)
    else:
        (tmp_path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(onnxport.InvalidInputError) as info:
        onnxport.export(meta, (torch.randn(3, 8),), weights=str(tmp_path))
    assert "model.safetensors" in str(info.value) and info.value.fix
