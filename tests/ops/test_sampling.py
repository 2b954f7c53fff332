"""Grid sampling and antialiased resizing, as aten overloads and functional calls."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, check_case, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16, f64 = torch.float32, torch.float16, torch.float64
Dim = torch.export.Dim
MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def grid(*shape: int, spread: float = 1.5) -> torch.Tensor:
    """Sampling points reaching ``spread`` past the [-1, 1] square, so every padding mode is exercised."""
    return (torch.rand(*shape) * 2 - 1) * spread


def half_pixel_grid(width: int) -> torch.Tensor:
    """x coordinates landing exactly between pixels, near and far outside the image (align_corners=False)."""
    k = torch.arange(-3 * width, 4 * width).float() + 0.5
    gx = (2 * k + 1) / width - 1
    return torch.stack([gx, torch.zeros_like(gx)], -1).view(1, 1, -1, 2)


class Wrap(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


def grid_sample_fn(mode: str, padding: str, align_corners: bool):
    def fn(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align_corners)

    fn.__name__ = f"grid_sample_{mode}_{padding}_ac{int(align_corners)}"
    return fn


def interpolate_aa(size=None, scale_factor=None, mode="bilinear", align_corners=False):
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners,
                             antialias=True)

    fn.__name__ = f"interpolate_aa_{mode}"
    return fn


CASES = [
    # every mode, padding and align_corners, 2-D and 3-D (torch has no 3-D bicubic)
    *[
        OpCase(grid_sample_fn(mode, padding, ac), args=lambda: (randn(2, 3, 5, 7), grid(2, 4, 6, 2)),
               expect_ops=["GridSample"])
        for mode, padding, ac in itertools.product(MODES, PADDINGS, (False, True))
    ],
    *[
        OpCase(grid_sample_fn(mode, padding, ac), args=lambda: (randn(2, 3, 4, 5, 6), grid(2, 3, 4, 5, 3)),
               name="3d", expect_ops=["GridSample"])
        for mode, padding, ac in itertools.product(("bilinear", "nearest"), PADDINGS, (False, True))
    ],
    # reflected coordinates that fall exactly between two pixels: torch rounds half to even
    *[
        OpCase(grid_sample_fn("nearest", "reflection", ac), args=lambda: (randn(1, 2, 3, 6), half_pixel_grid(6)),
               name="half_pixels")
        for ac in (False, True)
    ],
    OpCase(grid_sample_fn("nearest", "reflection", False),
           args=lambda: (randn(1, 2, 3, 4, 6), grid(1, 2, 3, 4, 3, spread=5)), name="3d_far"),
    OpCase(aten.grid_sampler_2d.default, args=lambda: (randn(2, 3, 5, 7), grid(2, 4, 6, 2), 0, 1, False),
           dtypes=(f32, f16, f64), tol={f16: (2e-2, 2e-2)}),
    OpCase(aten.grid_sampler_3d.default, args=lambda: (randn(1, 2, 3, 4, 5), grid(1, 2, 3, 4, 3), 1, 2, True),
           dtypes=(f32, f64)),
    OpCase(grid_sample_fn("bilinear", "zeros", False), args=lambda: (randn(2, 3, 5, 7), grid(2, 4, 6, 2)),
           name="dynamic", dynamic_shapes=(({0: Dim("n"), 2: Dim("h"), 3: Dim("w")}, {0: Dim("n"), 1: Dim("gh")}),)),
    OpCase(grid_sample_fn("nearest", "reflection", False), args=lambda: (randn(2, 3, 5, 7), grid(2, 4, 6, 2, spread=4)),
           name="dynamic", dynamic_shapes=(({0: Dim("n"), 2: Dim("h"), 3: Dim("w")}, {0: Dim("n")}),)),
    # antialiased resizing: downscaling (the filter stretched), upscaling, a kept axis, scale factors
    *[
        OpCase(aten._upsample_bilinear2d_aa.default, args=lambda: (randn(2, 3, 10, 20), size, ac),
               name=f"{size}_ac{int(ac)}", expect_ops=["MatMul"])
        for size in ([3, 3], [5, 7], [17, 9], [10, 6], [1, 1]) for ac in (False, True)
    ],
    OpCase(aten._upsample_bilinear2d_aa.default, args=lambda: (randn(2, 3, 10, 20), [3, 3], True, 1.7, 0.9),
           name="scales_align_corners"),
    OpCase(aten._upsample_bilinear2d_aa.default, args=lambda: (randn(1, 3, 10, 20), [17, 18], False, 1.7, 0.9),
           name="scales"),
    OpCase(aten._upsample_bilinear2d_aa.vec, args=lambda: (randn(6, 3, 10, 20), None, False, [1.7, 0.9]), name="vec"),
    OpCase(aten._upsample_bilinear2d_aa.default, args=lambda: (randn(2, 3, 10, 20), [5, 7], False),
           name="f64", dtypes=(f64,)),  # eager CPU has no float16 kernel to compare with
    OpCase(aten._upsample_bicubic2d_aa.default, args=lambda: (randn(2, 3, 10, 20), [4, 9], False), name="down"),
    OpCase(aten._upsample_bicubic2d_aa.default, args=lambda: (randn(2, 3, 7, 5), [15, 5], True), name="up_kept"),
    OpCase(interpolate_aa(size=(4, 6)), args=lambda: (randn(2, 3, 13, 17),)),
    OpCase(interpolate_aa(scale_factor=0.3, mode="bicubic"), args=lambda: (randn(2, 3, 13, 17),)),
    OpCase(interpolate_aa(size=(7, 9)), args=lambda: (randn(2, 3, 13, 17),), name="dynamic_batch",
           dynamic_shapes=(({0: Dim("n")},),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_grid_sample_3d_needs_opset_20() -> None:
    """GridSample takes 5-D inputs from opset 20: older opsets are refused, with the fix named."""
    model = Wrap(grid_sample_fn("bilinear", "zeros", False))
    with pytest.raises(onnxport.TranslationError, match="opset=20"):
        onnxport.export(model, (randn(1, 2, 3, 4, 5), grid(1, 2, 3, 4, 3)), opset=19, verify=False)


def test_grid_sample_2d_at_opset_18() -> None:
    """Before opset 20 the mode names are GridSample-16's: bilinear, nearest, bicubic."""
    for mode in MODES:
        check_case(OpCase(grid_sample_fn(mode, "border", False), args=lambda: (randn(1, 2, 5, 6), grid(1, 3, 4, 2))),
                   None, 18)


def test_antialias_symbolic_sizes_refused() -> None:
    model = Wrap(interpolate_aa(size=(4, 6)))
    with pytest.raises(onnxport.TranslationError, match="static"):
        onnxport.export(model, (randn(1, 2, 13, 17),), dynamic_shapes=(({2: Dim("h", min=8)},),), verify=False)


def test_nearest_reflection_symbolic_sizes() -> None:
    """The reflection's sizes come from Shape at run time: other image sizes match eager too."""
    model = Wrap(grid_sample_fn("nearest", "reflection", False))
    prog = onnxport.export(model, (randn(2, 3, 5, 7), grid(2, 4, 6, 2)), verify=False,
                           dynamic_shapes=(({0: Dim("n"), 2: Dim("h"), 3: Dim("w")}, {0: Dim("n")}),))
    for h, w in ((3, 11), (8, 4)):
        halves = half_pixel_grid(w)[:, :, :6].expand(2, 4, 6, 2)  # ties after reflection at this width
        x, g = randn(4, 3, h, w), torch.cat([grid(2, 4, 6, 2, spread=4), halves])
        torch.testing.assert_close(prog(x, g), model(x, g))
