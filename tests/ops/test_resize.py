"""``F.interpolate`` (resize.py): every ``upsample_*`` overload as ONNX ``Resize``, by size and by scale factors,
with and without ``align_corners``, and through ``F.interpolate`` at dynamic batch and image sizes (sizes read
from the input's shape) compared with eager at other sizes than the example's."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import randn
from torch.export import Dim

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f64 = torch.float32, torch.float64

# Every overload: .vec by sizes and by scale factors, .default by sizes and with the scales torch passes along
# (which then map coordinates, as F.interpolate(scale_factor=...) does).
OVERLOADS = [
    OpCase(aten.upsample_nearest1d.vec, args=lambda: (randn(2, 3, 7), [13], None), name="size"),
    OpCase(aten.upsample_nearest1d.vec, args=lambda: (randn(2, 3, 7), None, [2.5]), name="scale"),
    OpCase(aten.upsample_nearest1d.default, args=lambda: (randn(2, 3, 7), [13]), expect_ops=["Resize"]),
    OpCase(aten.upsample_nearest2d.vec, args=lambda: (randn(2, 3, 5, 6), [9, 4], None), name="size"),
    OpCase(aten.upsample_nearest2d.vec, args=lambda: (randn(2, 3, 5, 6), None, [2.0, 1.5]), name="scale"),
    OpCase(aten.upsample_nearest2d.default, args=lambda: (randn(2, 3, 5, 6), [10, 9], 2.0, 1.5), name="scales"),
    OpCase(aten.upsample_nearest3d.vec, args=lambda: (randn(1, 2, 3, 4, 5), [5, 3, 8], None), name="size"),
    OpCase(aten.upsample_nearest3d.default, args=lambda: (randn(1, 2, 3, 4, 5), [6, 8, 10])),
    OpCase(aten._upsample_nearest_exact1d.vec, args=lambda: (randn(2, 3, 7), [11], None), name="size"),
    OpCase(aten._upsample_nearest_exact1d.default, args=lambda: (randn(2, 3, 7), [4])),
    OpCase(aten._upsample_nearest_exact2d.vec, args=lambda: (randn(2, 3, 5, 6), None, [1.5, 2.0]), name="scale"),
    OpCase(aten._upsample_nearest_exact2d.default, args=lambda: (randn(2, 3, 5, 6), [7, 3])),
    OpCase(aten._upsample_nearest_exact3d.vec, args=lambda: (randn(1, 2, 3, 4, 5), [4, 7, 2], None), name="size"),
    OpCase(aten._upsample_nearest_exact3d.default, args=lambda: (randn(1, 2, 3, 4, 5), [6, 6, 6])),
    *[
        OpCase(aten.upsample_linear1d.vec, args=lambda: (randn(2, 3, 7), [12], ac, None), name=f"size_ac{int(ac)}")
        for ac in (False, True)
    ],
    OpCase(aten.upsample_linear1d.default, args=lambda: (randn(2, 3, 7), [17], False, 2.5), name="scale"),
    # float64 too: onnxruntime computes the source coordinates in float32 (differences up to ~4e-7)
    *[
        OpCase(aten.upsample_bilinear2d.vec, args=lambda: (randn(2, 3, 5, 6), [8, 11], ac, None),
               name=f"size_ac{int(ac)}", dtypes=(f32, f64), tol={f64: (2e-6, 2e-6)})
        for ac in (False, True)
    ],
    OpCase(aten.upsample_bilinear2d.vec, args=lambda: (randn(2, 3, 5, 6), None, False, [0.5, 1.7]), name="scale"),
    OpCase(aten.upsample_bilinear2d.default, args=lambda: (randn(2, 3, 5, 6), [3, 4], True), name="down_ac1"),
    *[
        OpCase(aten.upsample_trilinear3d.vec, args=lambda: (randn(1, 2, 3, 4, 5), [5, 6, 7], ac, None),
               name=f"size_ac{int(ac)}")
        for ac in (False, True)
    ],
    OpCase(aten.upsample_trilinear3d.default, args=lambda: (randn(1, 2, 3, 4, 5), [6, 8, 7], False, 2.0, 2.0, 1.5),
           name="scales"),
    *[
        OpCase(aten.upsample_bicubic2d.vec, args=lambda: (randn(2, 3, 5, 6), [9, 13], ac, None),
               name=f"size_ac{int(ac)}", expect_ops=["Resize"])
        for ac in (False, True)
    ],
    OpCase(aten.upsample_bicubic2d.default, args=lambda: (randn(2, 3, 8, 8), [4, 4], False), name="down"),
]


class Interpolate(torch.nn.Module):
    """``F.interpolate`` with fixed options; ``from_shape`` computes the size from the input's own sizes."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = options

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        options = dict(self.options)
        if options.pop("from_shape", False):
            options["size"] = (x.shape[2] * 2 - 1, x.shape[3] + 5)
        return F.interpolate(x, **options)


class Interpolate1d3d(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        seq = x.flatten(2)  # (b, c, h*w)
        vol = x[:, :, None].expand(-1, -1, 2, -1, -1)  # (b, c, 2, h, w)
        return (
            F.interpolate(seq, scale_factor=2.0, mode="nearest"),
            F.interpolate(seq, size=seq.shape[2] + 3, mode="linear", align_corners=True),
            F.interpolate(vol, scale_factor=(1.0, 2.0, 1.5), mode="trilinear", align_corners=False),
            F.interpolate(vol, size=(3, vol.shape[3] * 2, vol.shape[4]), mode="nearest-exact"),
        )


INTERPOLATE = {
    "nearest_scale2": {"scale_factor": 2.0, "mode": "nearest"},
    "nearest_scale1.5": {"scale_factor": 1.5, "mode": "nearest"},
    "nearest_size_from_shape": {"from_shape": True, "mode": "nearest"},
    "nearest_static_size": {"size": (7, 9), "mode": "nearest"},
    "nearest_exact_scale": {"scale_factor": 2.0, "mode": "nearest-exact"},
    "bilinear_scale2": {"scale_factor": 2.0, "mode": "bilinear", "align_corners": False},
    "bilinear_scale2_ac": {"scale_factor": 2.0, "mode": "bilinear", "align_corners": True},
    "bilinear_size_from_shape": {"from_shape": True, "mode": "bilinear", "align_corners": False},
    "bilinear_size_from_shape_ac": {"from_shape": True, "mode": "bilinear", "align_corners": True},
    "bilinear_static_size_ac": {"size": (5, 17), "mode": "bilinear", "align_corners": True},
    "bilinear_down_scale": {"scale_factor": 0.5, "mode": "bilinear", "align_corners": False},
    "bilinear_recompute": {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True},
    "bicubic_scale2": {"scale_factor": 2.0, "mode": "bicubic", "align_corners": False},
    "bicubic_size_from_shape_ac": {"from_shape": True, "mode": "bicubic", "align_corners": True},
}

# Batch, height and width dynamic: exported at (4, 3, 12, 15), compared at other sizes too.
IMAGE_DIMS = (({0: Dim("batch", min=2, max=16), 2: Dim("h", min=8, max=64), 3: Dim("w", min=8, max=64)},),)


def _other_images() -> list[tuple[torch.Tensor]]:
    return [(randn(b, 3, side, side + 3),) for b, side in ((3, 16), (5, 16), (3, 23), (2, 9))]


DYNAMIC = [
    *[OpCase(Interpolate(**options), args=lambda: (randn(4, 3, 12, 15),), name=name, dynamic_shapes=IMAGE_DIMS,
             others=_other_images)
      for name, options in INTERPOLATE.items()],
    # the 1-D resize spans ~900 positions: float32 source coordinates differ from torch's by ~1e-4
    OpCase(Interpolate1d3d(), args=lambda: (randn(4, 3, 12, 15),), name="1d_3d", dynamic_shapes=IMAGE_DIMS,
           others=_other_images, tol={f32: (1e-3, 1e-3)}),
]


@pytest.mark.parametrize(("case", "dtype"), params(OVERLOADS + DYNAMIC))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


@pytest.mark.parametrize("name", ["nearest_scale2", "bilinear_scale2_ac", "bilinear_static_size_ac"])
def test_interpolate_static(name: str) -> None:
    """Without dynamic shapes the sizes are constants: the file matches eager at the example."""
    torch.manual_seed(0)
    model = Interpolate(**INTERPOLATE[name])
    x = torch.randn(2, 3, 8, 11)
    prog = onnxport.export(model, (x,), verify=False)
    assert [node.op_type for node in prog.model.graph].count("Resize") == 1
    torch.testing.assert_close(prog(x), model(x), atol=1e-4, rtol=1e-4)

