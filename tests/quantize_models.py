"""Small models the quantization tests share."""

from __future__ import annotations

import torch


class Mlp(torch.nn.Module):
    """Input sizes 40 (not a multiple of the blocks: padded) and 96."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(40, 96)
        self.down = torch.nn.Linear(96, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))
