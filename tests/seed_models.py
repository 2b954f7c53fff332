"""The models of the seed tutorials' dynamic-shape sections, as written there, shared by the tests."""

import torch


class DynamicShapesExample1(torch.nn.Module):
    def forward(self, x):
        x = x[:, 2:]
        return torch.relu(x)


class DynamicShapesExample2(torch.nn.Module):
    def forward(self, x, y):
        return x @ y


class DerivedDimExample1(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


class DerivedDimExample2(torch.nn.Module):
    def forward(self, z, y):
        return z[1:] + y[1::3]


class DynamicModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(5, 3)

    def forward(self, w, x, y, z):
        x0 = x + y
        x1 = self.l(w)
        x2 = x0.flatten()
        x3 = x2 + z
        return x1, x3


class Foo(torch.nn.Module):
    def forward(self, x, y):
        w = x + y
        return w + torch.ones(4)
