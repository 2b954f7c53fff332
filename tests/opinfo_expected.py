"""The OpInfo entries that do not match eager today, with their outcome: ``tests/test_opinfo.py`` fails
when an entry not listed stops matching, when a listed one changes outcome, and when a listed one
matches (remove it then). Written by ``python bench/opinfo.py --write-expected``; ``EXPECTED_BEFORE`` at
the end is kept by hand (the writer does not know it: carry it over when rewriting the file)."""

EXPECTED = {
    'allclose': 'not capturable: cannot capture _Call: torch.export could not capture the model.',
    'as_strided.partial_views': 'refused: TranslationError: cannot translate as_strided = aten::as_strided: as_strided addresses memory outside',
    'broadcast_shapes': 'refused: InvalidInputError: the model returns no tensor for these inputs, only constants ([]): an ONNX model w',
    'corrcoef': 'not capturable: cannot capture _Call: torch.export could not capture the model.',
    'cov': 'not capturable: cannot capture _Call: torch.export could not capture the model.',
    'equal': 'not capturable: cannot capture _Call: torch.export could not capture the model.',
    'hash_tensor': 'refused: aten::hash_tensor',
    'linalg.eig': 'refused: aten::linalg_eig',
    'linalg.eigh': 'mismatch: Tensor-likes are not close!',
    'linalg.eigvals': 'refused: aten::linalg_eig',
    'linalg.lstsq': 'not capturable: cannot capture _Call: torch.export could not capture the model.',
    'linalg.lstsq.grad_oriented': 'not capturable: cannot capture _Call: torch.export could not capture the model.',
    'matrix_exp': 'mismatch: Tensor-likes are not close!',
    'narrow': 'not capturable: cannot capture _Call: torch.export could not capture the model.',
    'nn.functional.ctc_loss': 'not capturable: cannot capture _Call: torch.export could not capture the model.',
    'nn.functional.gaussian_nll_loss': 'not capturable: cannot capture _Call: the model branches on a tensor value at /work/main/bench/../tests/opinfo',
    'nn.functional.linear_cross_entropy.chunked': 'refused: torch_nn::_linear_cross_entropy_batch_chunked',
    'nn.functional.linear_cross_entropy.chunked_none': 'refused: torch_nn::_linear_cross_entropy_batch_chunked_no_reduction',
    'nn.functional.one_hot': 'not capturable: cannot capture _Call: the model branches on a tensor value at /work/main/bench/../tests/opinfo',
    'sparse.mm.reduce': 'refused: aten::_sparse_mm_reduce_impl',
    'sparse.sampled_addmm': 'refused: aten::sparse_sampled_addmm',
    'tensor_split': 'not capturable: cannot capture _Call: the model branches on a tensor value at /work/main/bench/../tests/opinfo',
    'to_sparse': 'refused: aten::_to_sparse, aten::_to_sparse.sparse_dim',
}

# Entries whose outcome holds only before a torch release, from which on they match: {entry: (release, outcome
# before it)}. tests/test_opinfo.py asks onnxport.versions.torch_at_least, so the expectation holds on every
# supported torch and the entry still fails where it changes outcome unexpectedly.
EXPECTED_BEFORE = {
    'combinations': ('2.14', 'not capturable: cannot capture _Call: torch.export could not capture the model.'),
    # torch 2.10's quantile checks 0 <= q <= 1 with a data-dependent aten.equal that torch.export cannot trace
    # (matches on 2.13; 2.11 and 2.12 not checked)
    'nanquantile': ('2.13', 'not capturable: cannot capture _Call: torch.export could not capture the model.'),
    'quantile': ('2.13', 'not capturable: cannot capture _Call: torch.export could not capture the model.'),
}
