"""torch.fft.* and torch.stft against eager PyTorch: ONNX DFT and STFT on the (real, imaginary) layout."""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, check_case, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f64 = torch.float32, torch.float64
c64, c128 = torch.complex64, torch.complex128
Dim = torch.export.Dim
# Complex outputs compare as complex; float64 inputs give complex128 ones.
TOL = {c64: (1e-4, 1e-4), c128: (1e-7, 1e-7)}
FFT = torch.fft


def crandn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=c64)


def rfft_ortho_roundtrip(x: torch.Tensor) -> torch.Tensor:
    return FFT.irfft(FFT.rfft(x, norm="ortho") * 2, n=x.shape[-1], norm="ortho")


def spectrum_power(x: torch.Tensor) -> torch.Tensor:
    return FFT.rfft(x).abs() ** 2


def hann_stft(x: torch.Tensor) -> torch.Tensor:
    return torch.stft(x, 16, hop_length=4, window=torch.hann_window(16), return_complex=True)


def short_window_stft(x: torch.Tensor) -> torch.Tensor:
    return torch.stft(x, 16, hop_length=5, win_length=10, window=torch.hann_window(10), normalized=True,
                      return_complex=True)


def no_window_stft(x: torch.Tensor) -> torch.Tensor:
    return torch.stft(x, 8, win_length=6, center=False, return_complex=True)


def two_sided_stft(x: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    return torch.stft(x, 8, hop_length=2, window=window, onesided=False, pad_mode="constant", return_complex=True)


def complex_stft(z: torch.Tensor) -> torch.Tensor:
    return torch.stft(z, 8, hop_length=3, window=torch.hann_window(8), return_complex=True)


def real_stft(x: torch.Tensor) -> torch.Tensor:
    return torch.stft(x, 8, window=torch.hann_window(8), return_complex=False)


def hamming_stft(x: torch.Tensor) -> torch.Tensor:
    return torch.stft(x, 16, hop_length=4, window=torch.hamming_window(16), return_complex=True)


def spectrogram(x: torch.Tensor) -> torch.Tensor:
    return torch.stft(x, 32, hop_length=8, window=torch.hann_window(32), return_complex=True).abs().pow(2)


class SpectralConv(torch.nn.Module):
    """The Fourier layer of a Fourier neural operator: keep the low modes, mix channels with complex weights."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 5, 4, 4, dtype=c64) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        modes = FFT.rfft2(x)
        out = torch.zeros(b, 5, h, w // 2 + 1, dtype=c64)
        out[:, :, :4, :4] = torch.einsum("bixy,ioxy->boxy", modes[:, :, :4, :4], self.weight)
        return FFT.irfft2(out, s=(h, w))


spectral_conv = SpectralConv()
spectral_conv.__name__ = "spectral_conv"


CASES = [
    # one dim; real and complex inputs, every norm, n padding and truncating
    OpCase(FFT.fft, args=lambda: (randn(4, 8),), expect_ops=["DFT"], dtypes=(f32, f64), tol=TOL),
    OpCase(FFT.fft, args=lambda: (crandn(4, 8),), name="complex", tol=TOL),
    OpCase(FFT.fft, args=lambda: (randn(5, 3),), kwargs={"dim": 0, "norm": "ortho"}, name="dim0_ortho", tol=TOL),
    OpCase(FFT.fft, args=lambda: (randn(6),), kwargs={"n": 10, "norm": "forward"}, name="pad_forward", tol=TOL),
    OpCase(FFT.fft, args=lambda: (crandn(2, 9),), kwargs={"n": 5}, name="truncate", tol=TOL),
    OpCase(FFT.ifft, args=lambda: (randn(4, 7),), tol=TOL),
    OpCase(FFT.ifft, args=lambda: (crandn(3, 8),), kwargs={"norm": "ortho"}, name="complex_ortho", tol=TOL),
    OpCase(FFT.ifft, args=lambda: (crandn(3, 8),), kwargs={"norm": "forward", "dim": 0}, name="forward", tol=TOL),
    OpCase(FFT.rfft, args=lambda: (randn(3, 10),), expect_ops=["DFT"], dtypes=(f32, f64), tol=TOL),
    OpCase(FFT.rfft, args=lambda: (randn(3, 9),), kwargs={"n": 12, "norm": "ortho"}, name="odd_pad", tol=TOL),
    OpCase(FFT.irfft, args=lambda: (crandn(3, 6),), tol=TOL, dtypes=None),
    OpCase(FFT.irfft, args=lambda: (crandn(3, 6),), kwargs={"n": 11, "norm": "forward"}, name="odd_n"),
    OpCase(FFT.irfft, args=lambda: (randn(4, 5),), kwargs={"dim": 0}, name="real_input_dim0"),
    OpCase(FFT.hfft, args=lambda: (crandn(3, 5),)),
    OpCase(FFT.hfft, args=lambda: (randn(3, 5),), kwargs={"n": 7, "norm": "ortho"}, name="real_n"),
    OpCase(FFT.ihfft, args=lambda: (randn(3, 8),), tol=TOL),
    # several dims
    OpCase(FFT.fft2, args=lambda: (randn(2, 4, 6),), tol=TOL),
    OpCase(FFT.fft2, args=lambda: (crandn(4, 6),), kwargs={"s": (3, 8), "norm": "ortho"}, name="s", tol=TOL),
    OpCase(FFT.ifft2, args=lambda: (crandn(2, 4, 6),), tol=TOL),
    OpCase(FFT.fftn, args=lambda: (randn(3, 4, 5),), tol=TOL),
    OpCase(FFT.fftn, args=lambda: (crandn(3, 4, 5),), kwargs={"dim": (0, 2)}, name="dims", tol=TOL),
    OpCase(FFT.ifftn, args=lambda: (crandn(3, 4, 5),), kwargs={"norm": "forward"}, name="forward", tol=TOL),
    OpCase(FFT.rfft2, args=lambda: (randn(2, 6, 8),), tol=TOL),
    OpCase(FFT.rfftn, args=lambda: (randn(3, 4, 5),), kwargs={"norm": "ortho"}, name="ortho", tol=TOL),
    OpCase(FFT.irfft2, args=lambda: (crandn(2, 6, 5),)),
    OpCase(FFT.irfftn, args=lambda: (crandn(3, 4, 5),), kwargs={"s": (4, 4, 9)}, name="s"),
    OpCase(FFT.hfft2, args=lambda: (crandn(4, 5),)),
    OpCase(FFT.ihfft2, args=lambda: (randn(4, 6),), tol=TOL),
    OpCase(FFT.ihfftn, args=lambda: (randn(3, 4, 6),), tol=TOL),
    # shifts and compositions
    OpCase(FFT.fftshift, args=lambda: (crandn(4, 7),), tol=TOL),
    OpCase(FFT.ifftshift, args=lambda: (crandn(4, 7),), kwargs={"dim": -1}, name="dim", tol=TOL),
    OpCase(rfft_ortho_roundtrip, args=lambda: (randn(3, 10),)),
    OpCase(spectrum_power, args=lambda: (randn(2, 16),), expect_ops=["DFT", "Sqrt"]),
    OpCase(spectral_conv, args=lambda: (randn(2, 3, 8, 8),), expect_ops=["DFT", "Einsum"]),
    # stft
    OpCase(hann_stft, args=lambda: (randn(2, 100),), expect_ops=["STFT"], tol=TOL),
    OpCase(hann_stft, args=lambda: (randn(64),), name="1d", tol=TOL),
    OpCase(short_window_stft, args=lambda: (randn(2, 80),), tol=TOL),
    OpCase(no_window_stft, args=lambda: (randn(40),), tol=TOL),
    OpCase(two_sided_stft, args=lambda: (randn(2, 30), torch.rand(8)), tol=TOL),
    OpCase(complex_stft, args=lambda: (crandn(2, 30),), tol=TOL),
    OpCase(real_stft, args=lambda: (randn(30),)),
    OpCase(hamming_stft, args=lambda: (randn(2, 60),), tol=TOL),
    OpCase(spectrogram, args=lambda: (randn(2, 200),), expect_ops=["STFT"]),
]
DYNAMIC = [
    OpCase(FFT.rfft, args=lambda: (randn(3, 10),), name="dynamic_length", tol=TOL,
           dynamic_shapes=(({0: Dim("b"), 1: Dim("t")},),)),
    OpCase(FFT.fft2, args=lambda: (randn(2, 5, 6),), kwargs={"norm": "ortho"}, name="dynamic", tol=TOL,
           dynamic_shapes=(({1: Dim("h"), 2: Dim("w")},),)),
    OpCase(FFT.ifft, args=lambda: (crandn(3, 8),), name="dynamic_batch", tol=TOL,
           dynamic_shapes=(({0: Dim("b")},),)),
    OpCase(FFT.irfft, args=lambda: (crandn(3, 6),), kwargs={"n": 10}, name="dynamic_batch",
           dynamic_shapes=(({0: Dim("b")},),)),
    OpCase(hann_stft, args=lambda: (randn(2, 100),), name="dynamic_batch", tol=TOL,
           dynamic_shapes=(({0: Dim("b")},),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES + DYNAMIC))
def test_fft(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


OPSET_18 = [c for c in CASES if c.id in {"fft_fft-complex", "fft_irfft-odd_n", "fft_fft2-s", "fft_irfft2", "fft_ihfft",
                                        "fft_fftn-dims", "hann_stft", "fft_ifft-forward"}]


@pytest.mark.parametrize(("case", "dtype"), params(OPSET_18))
def test_fft_opset18(case: OpCase, dtype: torch.dtype | None) -> None:
    """Before opset 20 DFT takes its axis as an attribute."""
    prog = check_case(case, dtype, 18)
    dft = [n for n in prog.model.graph.all_nodes() if n.op_type == "DFT"]
    assert all(len([i for i in n.inputs if i is not None]) <= 2 and "axis" in n.attributes for n in dft)


def test_complex_output_is_real_pairs_in_the_model() -> None:
    prog = onnxport.export(lambda_module(FFT.fft), (randn(3, 8),), verify=True)
    out = prog.model.graph.outputs[0]
    assert out.dtype == onnx.TensorProto.FLOAT and list(out.shape) == [3, 8, 2]
    assert prog.complex_outputs == [out.name]
    assert prog.report.verification.ok
    assert prog(randn(3, 8)).dtype == c64


def test_dft_uses_axis_input_from_opset_20() -> None:
    prog = onnxport.export(lambda_module(FFT.fft2), (randn(3, 8),), verify=False, opset=20)
    dft = [n for n in prog.model.graph.all_nodes() if n.op_type == "DFT"]
    assert len(dft) == 2 and all(len(n.inputs) == 3 and "axis" not in n.attributes for n in dft)


def test_stft_align_to_window_is_refused() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.stft(x, 8, win_length=4, center=False, align_to_window=True, return_complex=True)

    with pytest.raises(onnxport.TranslationError, match="align_to_window"):
        onnxport.export(lambda_module(fn), (randn(40),), verify=False)


def lambda_module(fn):  # noqa: ANN001, ANN201 - a tiny wrapper for the tests above
    class Fn(torch.nn.Module):
        def forward(self, *args):  # noqa: ANN002, ANN202
            return fn(*args)

    return Fn()
